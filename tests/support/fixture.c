#include "fixture.h"

sp_st_file *sp_fixture_open(const char *name) {
  char path[1024];
  sp_st_file *f = sp_st_open(sp_test_fixture_path(name, path, sizeof path));
  if (!f) fail_msg("%s", sp_last_error());
  return f;
}

const sp_tensor *sp_fixture_get(sp_st_file *f, const char *name) {
  const sp_tensor *t = sp_st_get(f, name);
  if (!t) fail_msg("fixture lacks '%s'", name);
  return t;
}
