/* Models by name (the CLI's --model and the configs' `model:` key). */
#include <string.h>

#include "spry/models.h"

const char *sp_model_names(void) { return "vgg-face vgg-nose"; }

sp_value sp_model_build(sp_graph *g, const sp_model_spec *spec, sp_value image) {
  if (!strcmp(spec->name, "vgg-face")) return sp_model_vgg(g, image, spec->height, spec->width, spec->keypoints);
  if (!strcmp(spec->name, "vgg-nose")) return sp_model_vgg(g, image, spec->height, spec->width, 1);
  return sp_graph_fail(g, "unknown model '%s' (known: %s)", spec->name, sp_model_names());
}
