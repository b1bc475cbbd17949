/* YAML documents as a small tree (libyaml underneath), with source lines for
 * error messages and a "used" mark so config readers can reject unknown keys. */
#ifndef SPRY_IO_YAML_H
#define SPRY_IO_YAML_H

typedef enum { SP_YAML_SCALAR, SP_YAML_MAP, SP_YAML_SEQ } sp_yaml_kind;

typedef struct sp_yaml {
  sp_yaml_kind kind;
  char *value; /* scalars */
  int line;    /* 1-based line in the source, 0 for values set from the command line */
  int n;       /* entries of a map or sequence */
  char **keys; /* map keys */
  struct sp_yaml **items;
  int used; /* set by readers; unknown keys are the ones left unused */
} sp_yaml;

/* NULL with an error "FILE:LINE: reason" on a syntax error. An empty file is
 * an empty map. The root must be a map. */
sp_yaml *sp_yaml_load_file(const char *path);
sp_yaml *sp_yaml_load_string(const char *text, const char *label);
void sp_yaml_free(sp_yaml *y);
/* Map lookup (marks nothing). */
sp_yaml *sp_yaml_get(const sp_yaml *map, const char *key);
/* "a.b.c=value" from the command line: sets (creating maps as needed) the
 * scalar at that dotted path. A value in [..] is parsed as a flow sequence. */
int sp_yaml_set(sp_yaml *root, const char *assignment);
/* First key (dotted path) under root that no reader marked used, or NULL. */
const char *sp_yaml_first_unused(const sp_yaml *root, char *buf, int n, int *line);

/* Block-style YAML that reads back to the same tree (malloc'ed). */
char *sp_yaml_emit(const sp_yaml *root);

#endif
