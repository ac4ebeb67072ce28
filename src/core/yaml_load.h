/* Reading YAML that comes from outside (config files, mesh files) without trusting it:
 *  - the file must be a regular file of at most MTF_YAML_MAX_FILE bytes (a FIFO, a directory or a device
 *    is refused at once: it is opened without blocking and checked with fstat);
 *  - nesting deeper than MTF_YAML_MAX_DEPTH collections is refused as soon as it is reached (libyaml's
 *    scanner is quadratic in the flow depth, so 200,000 '[' would otherwise take minutes);
 *  - a key that appears twice in one mapping is an error at the second occurrence (YAML 1.2 forbids it;
 *    libyaml would keep both and readers would silently take one);
 *  - more than one document, and scalars holding a NUL character, are refused;
 *  - byte errors (bad UTF-8, control characters) report the real line:column, computed from libyaml's
 *    byte offset (libyaml leaves problem_mark at 1:1 for them).
 * Every error is "source:line:column: ...". Pure C + libyaml. */
#ifndef MTF_CORE_YAML_LOAD_H
#define MTF_CORE_YAML_LOAD_H

#include <stddef.h>
#include <yaml.h>

#include "core/error.h"

#define MTF_YAML_MAX_FILE (16 << 20)
#define MTF_YAML_MAX_DEPTH 64

/* Reads a whole regular file into *text (NUL-terminated, free() it); `what` names it in messages
 * ("config"). */
int mtf_yaml_read_file(const char *path, const char *what, char **text, size_t *length, mtf_error *err);

/* Checks text as above and loads its (single) document into doc, which the caller must
 * yaml_document_delete on MTF_OK (and must not on an error). An empty text gives a document without
 * a root node. */
int mtf_yaml_load(const char *text, size_t length, const char *source, yaml_document_t *doc, mtf_error *err);

#endif
