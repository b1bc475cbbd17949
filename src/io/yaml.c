/* YAML to tree via libyaml's document API. */
#include "io/yaml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "io/json.h"
#include "spry/common.h"

static sp_yaml *node_new(sp_yaml_kind kind, int line) {
  sp_yaml *y = sp_xcalloc(1, sizeof *y);
  y->kind = kind;
  y->line = line;
  return y;
}

void sp_yaml_free(sp_yaml *y) {
  if (!y) return;
  for (int i = 0; i < y->n; i++) {
    if (y->keys) free(y->keys[i]);
    sp_yaml_free(y->items[i]);
  }
  free(y->keys);
  free(y->items);
  free(y->value);
  free(y);
}

static void push(sp_yaml *parent, char *key, sp_yaml *child) {
  parent->items = sp_xrealloc(parent->items, sizeof(sp_yaml *) * (size_t)(parent->n + 1));
  if (parent->kind == SP_YAML_MAP) {
    parent->keys = sp_xrealloc(parent->keys, sizeof(char *) * (size_t)(parent->n + 1));
    parent->keys[parent->n] = key;
  }
  parent->items[parent->n++] = child;
}

/* libyaml's document keeps an alias as a second reference to its anchor's
 * node, and copying the tree would expand it: eight lines of `&x [*y, *y,
 * ...]` make 10^8 nodes. Configs never need aliases: the text is scanned for
 * them first (refuse_aliases), so the tree is never larger than the file. */
typedef struct {
  yaml_document_t *doc;
  const char *label;
  int nodes; /* converted so far */
} converter;

/* A config has tens of keys, a list hundreds of values (flip tables): a tree
 * far larger is not a config, and its maps' duplicate-key checks would be
 * quadratic in time. */
#define MAX_YAML_NODES 16384

static sp_yaml *convert(converter *cv, int id, int depth);

static sp_yaml *convert_seq(converter *cv, yaml_node_t *node, int depth, int line) {
  sp_yaml *y = node_new(SP_YAML_SEQ, line);
  for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
    sp_yaml *c = convert(cv, *it, depth + 1);
    if (!c) return sp_yaml_free(y), NULL;
    push(y, NULL, c);
  }
  return y;
}

static sp_yaml *convert_map(converter *cv, yaml_node_t *node, int depth, int line) {
  sp_yaml *y = node_new(SP_YAML_MAP, line);
  for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(cv->doc, p->key);
    if (!k || k->type != YAML_SCALAR_NODE) {
      sp_error_set("%s:%d: map keys must be plain words", cv->label, line);
      return sp_yaml_free(y), NULL;
    }
    char *key = sp_xmalloc(k->data.scalar.length + 1);
    memcpy(key, k->data.scalar.value, k->data.scalar.length);
    key[k->data.scalar.length] = 0;
    if (sp_yaml_get(y, key)) {
      sp_error_set("%s:%d: key '%s' appears twice", cv->label, (int)k->start_mark.line + 1, key);
      free(key);
      return sp_yaml_free(y), NULL;
    }
    sp_yaml *c = convert(cv, p->value, depth + 1);
    if (!c) return free(key), sp_yaml_free(y), NULL;
    push(y, key, c);
  }
  return y;
}

/* Converts libyaml node `id` (depth-limited: configs are shallow, hostile
 * files are not allowed to recurse forever). */
static sp_yaml *convert(converter *cv, int id, int depth) {
  yaml_node_t *node = yaml_document_get_node(cv->doc, id);
  if (!node) return NULL;
  int line = (int)node->start_mark.line + 1;
  if (depth > 32) {
    sp_error_set("%s:%d: nesting deeper than 32 levels", cv->label, line);
    return NULL;
  }
  if (++cv->nodes > MAX_YAML_NODES) {
    sp_error_set("%s:%d: more than %d values; a config is a page of keys", cv->label, line, MAX_YAML_NODES);
    return NULL;
  }
  if (node->type == YAML_SCALAR_NODE) {
    sp_yaml *y = node_new(SP_YAML_SCALAR, line);
    y->value = sp_xmalloc(node->data.scalar.length + 1);
    memcpy(y->value, node->data.scalar.value, node->data.scalar.length);
    y->value[node->data.scalar.length] = 0;
    return y;
  }
  if (node->type == YAML_SEQUENCE_NODE) return convert_seq(cv, node, depth, line);
  return convert_map(cv, node, depth, line);
}

static sp_yaml *load(yaml_parser_t *parser, const char *label) {
  yaml_document_t doc;
  if (!yaml_parser_load(parser, &doc)) {
    sp_error_set("%s:%d: %s", label, (int)parser->problem_mark.line + 1,
                 parser->problem ? parser->problem : "YAML syntax error");
    return NULL;
  }
  sp_yaml *root;
  yaml_node_t *top = yaml_document_get_root_node(&doc);
  if (!top)
    root = node_new(SP_YAML_MAP, 1);
  else if (top->type != YAML_MAPPING_NODE) {
    sp_error_set("%s:%d: the top level must be a map of keys", label, (int)top->start_mark.line + 1);
    root = NULL;
  } else {
    converter cv = {&doc, label, 0};
    root = convert(&cv, 1, 0);
  }
  yaml_document_delete(&doc);
  /* One config per file: a second document (after ---) would be ignored. */
  if (root && yaml_parser_load(parser, &doc)) {
    yaml_node_t *more = yaml_document_get_root_node(&doc);
    if (more) {
      sp_error_set("%s:%d: a second YAML document; a config is one document", label, (int)more->start_mark.line + 1);
      sp_yaml_free(root);
      root = NULL;
    }
    yaml_document_delete(&doc);
  }
  return root;
}

/* A config is a page of keys; a checkpoint stores it resolved. Anything far
 * larger is not a config, and is refused before libyaml builds its tree. */
#define MAX_YAML_BYTES ((size_t)16 << 20)

/* The first alias of the text, by its own line (the document API would only
 * show the anchor's). A syntax error is left for the loader to report. */
static int refuse_aliases(const char *text, size_t len, const char *label) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return sp_error_set("%s: cannot start the YAML parser", label);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  int rc = 0;
  for (int done = 0; !done && rc == 0;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&parser, &ev)) break;
    if (ev.type == YAML_ALIAS_EVENT)
      rc = sp_error_set("%s:%d: an alias (*%s); configs do not use YAML anchors and aliases, write the value out",
                        label, (int)ev.start_mark.line + 1, (const char *)ev.data.alias.anchor);
    done = ev.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&parser);
  return rc;
}

static sp_yaml *load_text(const char *text, size_t len, const char *label) {
  if (len > MAX_YAML_BYTES)
    return sp_error_set("%s: %zu bytes of YAML; a config is at most %zu MB", label, len, MAX_YAML_BYTES >> 20), NULL;
  if (refuse_aliases(text, len, label) != 0) return NULL;
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return sp_error_set("%s: cannot start the YAML parser", label), NULL;
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  sp_yaml *y = load(&parser, label);
  yaml_parser_delete(&parser);
  return y;
}

sp_yaml *sp_yaml_load_string(const char *text, const char *label) { return load_text(text, strlen(text), label); }

sp_yaml *sp_yaml_load_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return sp_error_set("%s: cannot open: %s", path, strerror(errno)), NULL;
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return sp_error_set("%s: not a file (a YAML config is expected)", path), NULL;
  }
  if ((size_t)st.st_size > MAX_YAML_BYTES) {
    fclose(f);
    return sp_error_set("%s: %lld bytes; a config is at most %zu MB", path, (long long)st.st_size,
                        MAX_YAML_BYTES >> 20),
           NULL;
  }
  size_t n = (size_t)st.st_size;
  char *text = sp_xmalloc(n + 1);
  size_t got = fread(text, 1, n, f);
  fclose(f);
  sp_yaml *y = NULL;
  if (got != n)
    sp_error_set("%s: short read (%zu of %zu bytes)", path, got, n);
  else
    y = load_text(text, n, path);
  free(text);
  return y;
}

sp_yaml *sp_yaml_get(const sp_yaml *map, const char *key) {
  if (!map || map->kind != SP_YAML_MAP) return NULL;
  for (int i = 0; i < map->n; i++)
    if (!strcmp(map->keys[i], key)) return map->items[i];
  return NULL;
}

static sp_yaml *parse_value(const char *v) {
  size_t n = strlen(v);
  if (n >= 2 && v[0] == '[' && v[n - 1] == ']') {
    sp_yaml *seq = node_new(SP_YAML_SEQ, 0);
    char *body = sp_xstrdup(v + 1);
    body[n - 2] = 0;
    char *save = NULL;
    for (char *tok = strtok_r(body, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      while (*tok == ' ') tok++;
      char *end = tok + strlen(tok);
      while (end > tok && end[-1] == ' ') *--end = 0;
      sp_yaml *s = node_new(SP_YAML_SCALAR, 0);
      s->value = sp_xstrdup(tok);
      push(seq, NULL, s);
    }
    free(body);
    return seq;
  }
  sp_yaml *s = node_new(SP_YAML_SCALAR, 0);
  s->value = sp_xstrdup(v);
  return s;
}

/* Levels a value adds below its key: 1 for a scalar, more for a sequence or
 * map (the reader's depth limit counts them too). */
static int value_levels(const sp_yaml *v) {
  int deepest = 0;
  for (int i = 0; v->kind != SP_YAML_SCALAR && i < v->n; i++) {
    int d = value_levels(v->items[i]);
    if (d > deepest) deepest = d;
  }
  return 1 + deepest;
}

int sp_yaml_set(sp_yaml *root, const char *assignment) {
  /* The tree is emitted into checkpoints and read back, and libyaml reads
   * only UTF-8 (found by fuzz_yaml_config: a stray byte 0xCE made a config
   * whose emitted text did not load). */
  if (!sp_utf8_valid(assignment, strlen(assignment)))
    return sp_error_set("--set: '%s' is not valid UTF-8 text", assignment);
  const char *eq = strchr(assignment, '=');
  if (!eq || eq == assignment) return sp_error_set("--set wants key=value, got '%s'", assignment);
  char *path = sp_xmalloc((size_t)(eq - assignment) + 1);
  memcpy(path, assignment, (size_t)(eq - assignment));
  path[eq - assignment] = 0;
  /* strtok_r below would pass over empty names: "...=1" would set nothing
   * and "a..b=1" would set a.b, both silently. */
  if (path[0] == '.' || path[strlen(path) - 1] == '.' || strstr(path, "..")) {
    free(path);
    return sp_error_set(
        "--set %s: the key has an empty part (keys are names joined by single dots, "
        "e.g. data.size=128)",
        assignment);
  }
  /* The tree is emitted into checkpoints and read back, where nesting is
   * limited to 32 levels: a deeper key would make a checkpoint unreadable. */
  int parts = 1;
  for (const char *c = path; *c; c++) parts += *c == '.';
  if (parts > 32) {
    free(path);
    return sp_error_set("--set: a key of %d parts; configs nest at most 32 levels", parts);
  }
  sp_yaml *node = root;
  char *save = NULL, *part = strtok_r(path, ".", &save);
  while (part) {
    char *next = strtok_r(NULL, ".", &save);
    sp_yaml *child = sp_yaml_get(node, part);
    if (!next) {
      sp_yaml *value = parse_value(eq + 1);
      /* A flow sequence as the value of a 32-part key nests one level past
       * what the reader takes back (found by fuzz_yaml_config). */
      if (parts - 1 + value_levels(value) > 32) {
        sp_yaml_free(value);
        free(path);
        return sp_error_set("--set %s: the key and its value nest deeper than 32 levels", assignment);
      }
      if (child) {
        for (int i = 0; i < node->n; i++)
          if (node->items[i] == child) {
            sp_yaml_free(child);
            node->items[i] = value;
          }
      } else
        push(node, sp_xstrdup(part), value);
    } else {
      if (!child) {
        child = node_new(SP_YAML_MAP, 0);
        push(node, sp_xstrdup(part), child);
      } else if (child->kind != SP_YAML_MAP) {
        int rc = sp_error_set("--set %s: '%s' is not a map", assignment, part);
        free(path);
        return rc;
      }
      node = child;
    }
    part = next;
  }
  free(path);
  return 0;
}

static const char *find_unused(const sp_yaml *y, const char *prefix, char *buf, int n, int *line) {
  if (y->kind != SP_YAML_MAP) return NULL;
  for (int i = 0; i < y->n; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", y->keys[i]);
    if (!y->items[i]->used) {
      snprintf(buf, (size_t)n, "%s", path);
      *line = y->items[i]->line;
      return buf;
    }
    const char *deeper = find_unused(y->items[i], path, buf, n, line);
    if (deeper) return deeper;
  }
  return NULL;
}

const char *sp_yaml_first_unused(const sp_yaml *root, char *buf, int n, int *line) {
  return find_unused(root, "", buf, n, line);
}

/* ---- emitting (resolved configs stored in checkpoints) ---- */

typedef struct {
  char *s;
  size_t len, cap;
} text;

static void put(text *t, const char *s) {
  size_t n = strlen(s);
  if (t->len + n + 1 > t->cap) {
    t->cap = 2 * (t->len + n + 1) + 256;
    t->s = sp_xrealloc(t->s, t->cap);
  }
  memcpy(t->s + t->len, s, n + 1);
  t->len += n;
}

/* The code point YAML does not allow as a character of the stream
 * (controls, DEL, the C1 controls, U+FFFE and U+FFFF) at c, with its
 * length in *len; 0 for the rest (*len 1, or the UTF-8 sequence's length).
 * Text here is UTF-8 (libyaml read it, or sp_yaml_set checked it). */
static unsigned not_printable(const unsigned char *c, int *len) {
  *len = 1;
  if (*c < 0x20 || *c == 0x7F) return *c == '\t' ? 0 : *c;
  if (*c == 0xC2 && c[1] >= 0x80 && c[1] <= 0x9F) {
    *len = 2;
    return c[1];
  }
  if (*c == 0xEF && c[1] == 0xBF && (c[2] == 0xBE || c[2] == 0xBF)) {
    *len = 3;
    return c[2] == 0xBE ? 0xFFFE : 0xFFFF;
  }
  return 0;
}

/* Plain when it is safe to read back unchanged, else double-quoted, with
 * what YAML does not allow raw written as escapes. */
static void put_scalar(text *t, const char *v) {
  int plain = v[0] && !strchr(" -?:,[]{}#&*!|>'\"%@`", v[0]) && v[strlen(v) - 1] != ' ';
  for (const unsigned char *c = (const unsigned char *)v; plain && *c; c++) {
    int len;
    if (*c == '#' || *c == '\n' || *c == '\t' || (*c == ':' && (c[1] == ' ' || !c[1])) || not_printable(c, &len))
      plain = 0;
  }
  if (plain) {
    put(t, v);
    return;
  }
  put(t, "\"");
  for (const unsigned char *c = (const unsigned char *)v; *c;) {
    char esc[8];
    int len;
    const unsigned cp = not_printable(c, &len);
    if (*c == '"' || *c == '\\')
      snprintf(esc, sizeof esc, "\\%c", *c);
    else if (*c == '\n')
      snprintf(esc, sizeof esc, "\\n");
    else if (*c == '\t')
      snprintf(esc, sizeof esc, "\\t");
    else if (cp)
      snprintf(esc, sizeof esc, cp > 0xFF ? "\\u%04x" : "\\x%02x", cp);
    else
      snprintf(esc, sizeof esc, "%c", *c);
    put(t, esc);
    c += cp ? len : 1;
  }
  put(t, "\"");
}

static void emit(text *t, const sp_yaml *y, int indent) {
  char pad[80];
  snprintf(pad, sizeof pad, "%*s", indent, "");
  for (int i = 0; i < y->n; i++) {
    const sp_yaml *c = y->items[i];
    put(t, pad);
    if (y->kind == SP_YAML_MAP) {
      put_scalar(t, y->keys[i]);
      put(t, ":");
    } else {
      put(t, "-");
    }
    if (c->kind == SP_YAML_SCALAR) {
      put(t, " ");
      put_scalar(t, c->value);
      put(t, "\n");
    } else if (c->n == 0) {
      put(t, c->kind == SP_YAML_MAP ? " {}\n" : " []\n");
    } else {
      put(t, "\n");
      emit(t, c, indent + 2);
    }
  }
}

char *sp_yaml_emit(const sp_yaml *root) {
  text t = {0};
  put(&t, "");
  emit(&t, root, 0);
  return t.s;
}
