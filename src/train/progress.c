/* One-line progress bar on stderr, redrawn at most 10 times a second and only
 * when stderr is a terminal (logs stay clean; the epoch summary still prints). */
#include <stdio.h>
#include <unistd.h>

#include "train/trainer_internal.h"

void sp_progress_begin(sp_progress *p) {
  p->start = sp_now();
  p->last_draw = 0;
  p->enabled = isatty(STDERR_FILENO);
}

void sp_progress_draw(sp_progress *p, int epoch, int epochs, int step, int steps, double loss, double img_per_s,
                      int force) {
  double now = sp_now();
  if (!p->enabled || (!force && now - p->last_draw < 0.1)) return;
  p->last_draw = now;
  char bar[21];
  int filled = steps ? 20 * step / steps : 20;
  for (int i = 0; i < 20; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[20] = 0;
  double elapsed = now - p->start, eta = step ? elapsed * (steps - step) / step : 0;
  fprintf(stderr, "\repoch %d/%d [%s] %d/%d loss %.4f %.0f img/s ETA %d:%02d  ", epoch, epochs, bar, step, steps, loss,
          img_per_s, (int)eta / 60, (int)eta % 60);
  fflush(stderr);
}

void sp_progress_end(sp_progress *p) {
  if (p->enabled) fprintf(stderr, "\r%80s\r", "");
}
