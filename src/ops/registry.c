/* The list of every op (ops.h), in one place: the coverage test walks it and
 * checks each op's row of src/ops/README.md (reference, fast kernel, gradient
 * check, PyTorch fixture, cpu-vs-ref cases). A new op is added here too. */
#include "ops/ops.h"

const sp_op_def *const sp_ops_all[] = {
    &sp_op_conv2d,         &sp_op_conv_transpose2d, &sp_op_linear,          &sp_op_batchnorm,     &sp_op_batchnorm_sync,
    &sp_op_relu,           &sp_op_hardswish,        &sp_op_dropout,         &sp_op_maxpool2d,     &sp_op_avgpool2d,
    &sp_op_global_avgpool, &sp_op_blurpool,         &sp_op_upsample,        &sp_op_add,           &sp_op_concat,
    &sp_op_reshape,        &sp_op_softargmax,       &sp_op_spatial_softmax, &sp_op_tshift,        &sp_op_l1_loss,
    &sp_op_mse_loss,       &sp_op_point_loss,       &sp_op_structure_loss,  &sp_op_cross_entropy,
};
const int sp_ops_count = (int)(sizeof sp_ops_all / sizeof sp_ops_all[0]);
