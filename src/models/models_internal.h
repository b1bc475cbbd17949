/* Helpers shared by the model files of src/models (not public API). */
#ifndef SPRY_MODELS_INTERNAL_H
#define SPRY_MODELS_INTERNAL_H

#include "spry/models.h"

/* Re-initialises the conv weights among parameters [first_param, end_param)
 * as torchvision's ResNets do: kaiming with fan_out (see resnet.c). */
void sp_models_kaiming_fan_out(sp_graph *g, int first_param, int end_param);

#endif
