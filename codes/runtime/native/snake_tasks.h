/* Snake's loop (snake.c has the op around it), in lanes.h's vectors: included once for each width by tier16.c
 * and tier8.c. A task takes SNAKE_CHUNK samples of one channel's row. */

/* sin(t)^2: t reduced by pi/2 (three-part Cody-Waite), an odd quadrant taking cos^2 of the remainder; both by
 * Cephes' polynomials on [-pi/4, pi/4] */
LANE_ISA static inline vf sin_squared(vf t) {
  vf n = vround(vmul(t, vset(0.63661977236758134f)));
  vf r = vfnma(n, vset(1.5703125f), t);
  r = vfnma(n, vset(4.837512969970703125e-4f), r);
  r = vfnma(n, vset(7.54978995489188216e-8f), r);
  vf z = vmul(r, r);
  vf s = vfma(z, vset(-1.9515295891e-4f), vset(8.3321608736e-3f));
  s = vfma(z, s, vset(-1.6666654611e-1f));
  s = vfma(vmul(z, r), s, r);
  vf c = vfma(z, vset(2.443315711809948e-5f), vset(-1.388731625493765e-3f));
  c = vfma(z, c, vset(4.166664568298827e-2f));
  c = vfma(vmul(z, z), c, vfnma(z, vset(0.5f), vset(1.f)));
  vf v = vselect(vodd(n), s, c);
  return vmul(v, v);
}

LANE_ISA static void TIERED(snake_task)(void* data, size_t task) {
  const SnakeCall* c = data;
  int64_t row = (int64_t)task / c->chunks, start = ((int64_t)task % c->chunks) * SNAKE_CHUNK;
  int64_t end = start + SNAKE_CHUNK < c->L ? start + SNAKE_CHUNK : c->L, channel = row % c->C;
  const float* x = c->x + row * c->L;
  float* y = c->y + row * c->L;
  vf alpha = vset(c->alpha[channel]), inverse = vset(c->inverse[channel]);
  for (int64_t i = start; i < end; i += LANES) {
    vf v = vload(x + i, end - i);
    vstore(y + i, end - i, vfma(inverse, sin_squared(vmul(alpha, v)), v));
  }
}
