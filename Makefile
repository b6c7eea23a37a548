# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO   := models/demo-cpu
CHROMIUM := /usr/bin/chromium
EPUBCHECK := /usr/share/java/epubcheck.jar
SUDO   := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: setup browser checkers demo test test-durations clean

# The agent plugins are installed packages (not the checkout's files): a change to them is installed again.
PLUGINS := $(wildcard integrations/*/pyproject.toml integrations/livekit/livekit/plugins/omnivoice/*.py \
                      integrations/pipecat/pipecat_omnivoice/*.py)

$(STAMP): requirements.txt requirements-runtime.txt $(PLUGINS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --force-reinstall ./integrations/livekit ./integrations/pipecat
	touch $(STAMP)

# The JavaScript runtime's packages (web/): onnxruntime-node's install script would download CUDA binaries,
# so web/.npmrc skips it; its bundled CPU binary is what runs.
WEB_STAMP := web/node_modules/.installed-stamp
$(WEB_STAMP): web/package.json web/package-lock.json
	npm ci --prefix web --no-audit --no-fund
	touch $(WEB_STAMP)

# Our kernels, which the runtime loads into ONNX Runtime on x86-64 CPUs with AVX2 or more (all of them with
# AVX-512 VNNI and BF16; codes/runtime/contract/native_kernels.py). Elsewhere, or without a C compiler, they are
# not built and the runtime keeps ONNX Runtime's own ops.
KERNELS_LIB := codes/runtime/native/libomnivoice_kernels.so
KERNELS_SRC := $(wildcard codes/runtime/native/*.c)
$(KERNELS_LIB): $(KERNELS_SRC) $(wildcard codes/runtime/native/*.h)
	@if [ "$$(uname -m)" = x86_64 ] && command -v cc >/dev/null; then \
		cc -O3 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -o $@ $(KERNELS_SRC); \
	else echo "note: $@ not built (it needs an x86-64 C compiler); ONNX Runtime's own ops run instead"; fi

setup: $(STAMP) $(WEB_STAMP) $(KERNELS_LIB)

# The browser tests' browser (tests/serve/test_playground.py): Debian's chromium, which Playwright drives by its
# path, since Playwright's own browser download cannot be reached from every machine.
$(CHROMIUM):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

browser: $(CHROMIUM)

# The read-along EPUB's checker (tests/runtime/test_book.py): Debian's epubcheck, the W3C's own, on Java.
$(EPUBCHECK):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq epubcheck

checkers: $(EPUBCHECK)

demo: setup
	$(PY) optimize.py --model tiny-random --device cpu --include-higgs --output $(DEMO) --overwrite
	$(PY) eval.py --mode equiv --model_dir $(DEMO)
	$(PY) inference.py --model_dir $(DEMO) --text "Hello from OmniVoice, running on ONNX Runtime." \
		--language en --seed 0 --output demo.wav

test: setup browser checkers
	npm --prefix web run --silent check
	$(PY) -m pytest -q -n auto --maxprocesses 4 tests

# The suite with its slowest tests and fixtures (a fixture's time shows as its first user's "setup").
test-durations: setup browser checkers
	$(PY) -m pytest -q -n auto --maxprocesses 4 tests --durations=40 --durations-min=1

clean:
	rm -rf models .cache demo.wav web/node_modules
