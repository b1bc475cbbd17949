/* The report's index.html: one static page, readable offline and from a
 * plain file:// URL, so a run directory can be copied anywhere and opened. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "io/plot_internal.h"

static void put_escaped(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&#39;", f); break;
      default: fputc(*s, f);
    }
  }
}

/* Text with line breaks kept: a blank line ends a paragraph, a single
 * newline is a <br>. */
static void put_paragraphs(FILE *f, const char *s) {
  fputs("<p>", f);
  while (*s) {
    if (s[0] == '\n' && s[1] == '\n') {
      while (*s == '\n') s++;
      if (*s) fputs("</p>\n<p>", f);
      continue;
    }
    if (*s == '\n') {
      fputs("<br>", f);
    } else {
      char one[2] = {*s, 0};
      put_escaped(f, one);
    }
    s++;
  }
  fputs("</p>\n", f);
}

/* A relative path as a URL: bytes outside the unreserved set (and '/') are
 * percent-encoded, so '#', '?', '%' and spaces in file names do not change
 * what the browser fetches. */
static void put_url(FILE *f, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("-._~/", ch))
      fputc(ch, f);
    else
      fprintf(f, "%%%c%c", hex[ch >> 4], hex[ch & 15]);
  }
}

typedef struct {
  const char *path, *title;
  int n_rows;
  const char *const *keys, *const *values;
  int n_items;
  const sp_report_item *items;
} page;

static const char *style =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;"
    "max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}\n"
    "h1{font-size:1.6em;margin-bottom:.6em}h2{font-size:1.2em;margin:1.6em 0 .4em;"
    "border-bottom:1px solid #ddd;padding-bottom:.2em}\n"
    "table{border-collapse:collapse;margin:1em 0}th,td{padding:.25em .9em;border-bottom:1px solid #e4e4e4;"
    "text-align:left}th{font-weight:600;color:#444}td{font-variant-numeric:tabular-nums}\n"
    "figure{margin:.6em 0}img{max-width:100%;height:auto;border:1px solid #ddd}\n"
    "nav a{margin-right:1em}\n";

static int html_fill(FILE *f, void *ctx) {
  const page *p = ctx;
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", f);
  fputs("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>", f);
  put_escaped(f, p->title);
  fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>", style);
  put_escaped(f, p->title);
  fputs("</h1>\n", f);
  if (p->n_items > 1) { /* a contents line: the page gets long with many figures */
    fputs("<nav>", f);
    for (int i = 0; i < p->n_items; i++) {
      fprintf(f, "<a href=\"#fig%d\">", i);
      put_escaped(f, p->items[i].heading ? p->items[i].heading : "figure");
      fputs("</a>", f);
    }
    fputs("</nav>\n", f);
  }
  if (p->n_rows > 0) {
    fputs("<table>\n<tbody>\n", f);
    for (int i = 0; i < p->n_rows; i++) {
      fputs("<tr><th>", f);
      put_escaped(f, p->keys[i]);
      fputs("</th><td>", f);
      put_escaped(f, p->values[i]);
      fputs("</td></tr>\n", f);
    }
    fputs("</tbody>\n</table>\n", f);
  }
  for (int i = 0; i < p->n_items; i++) {
    const sp_report_item *it = &p->items[i];
    fprintf(f, "<section id=\"fig%d\">\n", i);
    if (it->heading) {
      fputs("<h2>", f);
      put_escaped(f, it->heading);
      fputs("</h2>\n", f);
    }
    if (it->text && *it->text) put_paragraphs(f, it->text);
    if (it->png && *it->png) {
      /* The image links to itself: max-width shrinks big figures to the
       * page, and a click shows them at full size. */
      fputs("<figure><a href=\"", f);
      put_url(f, it->png);
      fputs("\"><img src=\"", f);
      put_url(f, it->png);
      fputs("\" alt=\"", f);
      put_escaped(f, it->heading ? it->heading : it->png);
      fputs("\"></a></figure>\n", f);
    }
    fputs("</section>\n", f);
  }
  fputs("</body>\n</html>\n", f);
  if (ferror(f)) return sp_error_set("%s: writing: %s", p->path, strerror(errno));
  return 0;
}

int sp_report_index_html(const char *html_path, const char *title, int n_rows, const char *const *keys,
                         const char *const *values, int n_items, const sp_report_item *items) {
  if (!html_path || !*html_path) return sp_error_set("report: no output path given");
  if (n_rows < 0 || (n_rows > 0 && (!keys || !values)))
    return sp_error_set("%s: bad metrics table (%d rows)", html_path, n_rows);
  if (n_items < 0 || (n_items > 0 && !items)) return sp_error_set("%s: bad item list (%d items)", html_path, n_items);
  for (int i = 0; i < n_rows; i++)
    if (!keys[i] || !values[i]) return sp_error_set("%s: metrics row %d has a NULL key or value", html_path, i);
  page p = {html_path, title && *title ? title : "spry report", n_rows, keys, values, n_items, items};
  return sp_plot_write_atomic(html_path, html_fill, &p);
}
