/* Reading PyTorch fixtures (safetensors under tests/fixtures) in tests: each
 * helper fails the current cmocka test with the reason instead of returning
 * an error. */
#ifndef SPRY_TEST_FIXTURE_H
#define SPRY_TEST_FIXTURE_H

#include "spry/safetensors.h"
#include "testkit.h"

/* Opens tests/fixtures/<name>. */
sp_st_file *sp_fixture_open(const char *name);
/* The tensor called name (the test fails when it is missing). */
const sp_tensor *sp_fixture_get(sp_st_file *f, const char *name);

#endif
