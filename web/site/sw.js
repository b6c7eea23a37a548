// The site's service worker: keeps the page, the runtime and the build's graphs in the browser's cache, so a second
// visit works offline. A file a build's manifest names with its sha256 cannot change under that digest, so it is
// answered from the cache first, kept under its URL and digest; everything else (the page before its digest is
// known, the manifests themselves) from the network first, and from the cache when the network fails. Files are kept
// as they are fetched, and once the page has loaded the model it asks for the rest of the build ("keep"), so what
// the first visit did not use yet (the codec, cloning's encoders) is there offline too.
/// <reference lib="webworker" />
/** @type {ServiceWorkerGlobalScope} */
const worker = /** @type {any} */ (self);

const VERSION = "1";
const SITE = `omnivoice-site-${VERSION}`; // network first
const BUILD = `omnivoice-build-${VERSION}`; // cache first, by digest
const MANIFEST = "omnivoice_manifest.json";
const SHELL = ["./", "index.html", "page.mjs", "page.css"]; // fetched before this worker holds the page

worker.addEventListener("install", (event) => {
  event.waitUntil(caches.open(SITE).then((cache) => cache.addAll(SHELL)).then(() => worker.skipWaiting()));
});

worker.addEventListener("activate", (event) => {
  const kept = [SITE, BUILD];
  event.waitUntil(caches.keys()
    .then((names) => Promise.all(names.filter((name) => name.startsWith("omnivoice-") && !kept.includes(name))
      .map((name) => caches.delete(name))))
    .then(() => worker.clients.claim())); // hold the open page now, so its graphs are kept on this first visit
});

worker.addEventListener("fetch", (event) => {
  const request = event.request;
  // a partial read (Range) goes to the network as it is: a 206 cannot be kept
  if (!["GET", "HEAD"].includes(request.method) || request.headers.has("range")) return;
  if (!request.url.startsWith(worker.registration.scope)) return;
  event.respondWith(request.method === "HEAD" ? head(request) : answer(request));
});

worker.addEventListener("message", (event) => {
  if (event.data?.type !== "keep") return;
  const page = event.source;
  event.waitUntil(keepBuild((message) => page?.postMessage(message))
    .catch((error) => page?.postMessage({ type: "not-kept", error: String(error?.message ?? error) })));
});

/** A GET: from the cache first where a manifest gives the file's digest, else from the network first.
 * @param {Request} request @returns {Promise<Response>} */
async function answer(request) {
  const url = new URL(request.url);
  url.hash = "";
  const isManifest = url.pathname.endsWith(`/${MANIFEST}`);
  const digest = isManifest ? null : await digestOf(url);
  if (digest) return fromCacheFirst(request, keyOf(url.href, digest));
  const response = await fromNetworkFirst(request);
  if (isManifest && response.ok) manifests.set(folderOf(url.href), response.clone().json().catch(() => ({})));
  return response;
}

/** HEAD (the runtime asks whether a file is there): the network's answer, or offline the kept GET's, bodiless.
 * @param {Request} request */
async function head(request) {
  try {
    return await fetch(request);
  } catch {
    const kept = await answer(new Request(request.url));
    return new Response(null, { status: kept.status, statusText: kept.statusText, headers: kept.headers });
  }
}

/** @param {string} href @param {string} digest */
function keyOf(href, digest) {
  return `${href}?sha256=${digest}`;
}

/** @param {Request} request @param {string} key */
async function fromCacheFirst(request, key) {
  const kept = await (await caches.open(BUILD)).match(key);
  if (kept) return kept;
  /** @type {Response} */
  let response;
  try {
    response = await fetch(request);
  } catch (error) { // offline: a copy kept before its digest was known (the page's first files), if any
    const earlier = await (await caches.open(SITE)).match(request);
    if (earlier) return earlier;
    throw error;
  }
  if (response.status === 200) keep(key, response.clone()).catch((error) => console.warn(`not kept: ${key}: ${error}`));
  return response;
}

/** Keeps a file under its URL and digest, in place of the same file under an older digest.
 * @param {string} key @param {Response} response */
async function keep(key, response) {
  const cache = await caches.open(BUILD);
  const file = key.slice(0, key.lastIndexOf("?") + 1);
  const stale = (await cache.keys()).filter((old) => old.url !== key && old.url.startsWith(file));
  await Promise.all(stale.map((old) => cache.delete(old)));
  await cache.put(key, response);
}

/** @param {Request} request */
async function fromNetworkFirst(request) {
  const cache = await caches.open(SITE);
  try {
    const response = await fetch(request);
    if (response.status === 200) {
      cache.put(request, response.clone()).catch((error) => console.warn(`not kept: ${request.url}: ${error}`));
    }
    return response;
  } catch (error) {
    const kept = await cache.match(request);
    if (kept) return kept;
    throw error;
  }
}

/** @type {Map<string, Promise<any>>} each folder's manifest (or {}), read once a run */
const manifests = new Map();

/** @param {string} href */
function folderOf(href) {
  return href.slice(0, href.lastIndexOf("/") + 1);
}

/** The manifest in `folder` (from the network first, then the cache), or {} where there is none.
 * @param {string} folder @returns {Promise<any>} */
function manifestOf(folder) {
  let found = manifests.get(folder);
  if (!found) {
    found = fromNetworkFirst(new Request(`${folder}${MANIFEST}`, { cache: "no-cache" }))
      .then((response) => (response.ok ? response.json() : {}))
      .catch(() => ({}));
    manifests.set(folder, found);
  }
  return found;
}

/** A manifest's `files` as {name: sha256}. @param {any} manifest @returns {Record<string, string>} */
function filesOf(manifest) {
  const files = manifest?.files;
  if (!files || typeof files !== "object" || Array.isArray(files)) return {};
  return Object.fromEntries(Object.entries(files).filter(([, digest]) => /^[0-9a-f]{64}$/.test(String(digest))));
}

/** The sha256 a manifest gives the file at `url`: the site root's (a web build lists its whole site), else its own
 * folder's or one between (a codec folder keeps its own manifest).
 * @param {URL} url */
async function digestOf(url) {
  const scope = worker.registration.scope;
  if (url.search || !url.href.startsWith(scope)) return null;
  const folders = [scope];
  for (let folder = folderOf(url.href); folder.startsWith(scope) && folder !== scope;) {
    folders.push(folder);
    folder = folderOf(new URL("..", folder).href);
  }
  for (const folder of folders) {
    const digest = filesOf(await manifestOf(folder))[decodeURIComponent(url.href.slice(folder.length))];
    if (digest) return digest;
  }
  return null;
}

/** Every file the build lists (its manifest's, and its codec folder's), fetched into the cache where not kept yet,
 * one at a time; tells the page {type: "keeping", done, count} as it goes and {type: "kept", bytes} at the end.
 * @param {(message: object) => void} tell */
async function keepBuild(tell) {
  const scope = worker.registration.scope;
  const root = await manifestOf(scope);
  const listed = Object.entries(filesOf(root)).map(([name, digest]) => [new URL(name, scope).href, digest]);
  const codec = root?.higgs_tokenizer?.models_dir;
  if (typeof codec === "string" && codec && !codec.startsWith("/")) {
    const folder = new URL(codec.endsWith("/") ? codec : `${codec}/`, scope).href;
    if (folder.startsWith(scope) && folder !== scope) {
      listed.push(...Object.entries(filesOf(await manifestOf(folder))).map(([name, digest]) =>
        [new URL(name, folder).href, digest]));
    }
  }
  const cache = await caches.open(BUILD);
  let bytes = 0;
  for (const [done, [href, digest]] of listed.entries()) {
    tell({ type: "keeping", done, count: listed.length });
    const key = keyOf(href, digest);
    let response = await cache.match(key);
    if (!response) {
      const fetched = await fetch(href);
      if (fetched.status !== 200) throw new Error(`${href}: HTTP ${fetched.status}`);
      await keep(key, fetched);
      response = await cache.match(key);
    }
    bytes += Number(response?.headers.get("content-length") ?? 0);
  }
  tell({ type: "kept", bytes, count: listed.length });
}
