#include "core/mesh_yaml.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/mesh.h"

static int at(mtf_error *err, int code, const char *source, const yaml_node_t *node, const char *key,
              const char *what) {
  return mtf_error_set(err, code, "%s:%zu:%zu: %s: %s", source, node->start_mark.line + 1,
                       node->start_mark.column + 1, key, what);
}

int mtf_mesh_from_yaml_node(yaml_document_t *doc, yaml_node_t *node, const char *source, const char *key,
                            mtf_shape *mesh, mtf_error *err) {
  char what[MTF_ERROR_MSG_MAX / 2];
  if (node->type == YAML_SCALAR_NODE) {
    int rc = mtf_mesh_parse((const char *)node->data.scalar.value, mesh, err);
    if (rc) return mtf_error_prefix(err, "%s:%zu:%zu: %s", source, node->start_mark.line + 1,
                                    node->start_mark.column + 1, key);
    return MTF_OK;
  }
  if (node->type != YAML_MAPPING_NODE)
    return at(err, MTF_ERR_PARSE, source, node, key,
              "a mesh shape is a mapping of axis name to size ({b: 2, m: 4}) or a string (\"b:2;m:4\"), not a "
              "list");
  memset(mesh, 0, sizeof *mesh);
  for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
    yaml_node_t *name_node = yaml_document_get_node(doc, pair->key);
    yaml_node_t *size_node = yaml_document_get_node(doc, pair->value);
    if (name_node->type != YAML_SCALAR_NODE)
      return at(err, MTF_ERR_PARSE, source, name_node, key, "mesh axis names must be plain strings");
    const char *name = (const char *)name_node->data.scalar.value;
    if (size_node->type != YAML_SCALAR_NODE) {
      snprintf(what, sizeof what, "size of mesh axis '%s' must be an integer, not a %s", name,
               size_node->type == YAML_MAPPING_NODE ? "mapping" : "list");
      return at(err, MTF_ERR_PARSE, source, size_node, key, what);
    }
    const char *size_text = (const char *)size_node->data.scalar.value;
    char *end = NULL;
    errno = 0;
    long long size = strtoll(size_text, &end, 10);
    if (size_text[0] == '\0' || *end != '\0' || errno == ERANGE) {
      snprintf(what, sizeof what, "size of mesh axis '%s' is '%s', which is not an integer", name, size_text);
      return at(err, MTF_ERR_PARSE, source, size_node, key, what);
    }
    if (mtf_shape_append(mesh, name, (int64_t)size, err) != MTF_OK)
      return mtf_error_prefix(err, "%s:%zu:%zu: %s: mesh axis", source, name_node->start_mark.line + 1,
                              name_node->start_mark.column + 1, key);
  }
  int rc = mtf_mesh_validate(mesh, err);
  if (rc) return mtf_error_prefix(err, "%s:%zu:%zu: %s", source, node->start_mark.line + 1,
                                  node->start_mark.column + 1, key);
  return MTF_OK;
}

int mtf_mesh_parse_yaml(const char *text, size_t length, const char *source, mtf_shape *mesh, mtf_error *err) {
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return mtf_error_set(err, MTF_ERR_NOMEM, "cannot start the YAML parser");
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, length);
  int rc = MTF_OK;
  if (!yaml_parser_load(&parser, &doc)) {
    rc = mtf_error_set(err, MTF_ERR_PARSE, "%s:%zu:%zu: YAML syntax error: %s", source,
                       parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                       parser.problem ? parser.problem : "unknown problem");
    yaml_parser_delete(&parser);
    return rc;
  }
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root)
    rc = mtf_error_set(err, MTF_ERR_PARSE, "%s: empty document; expected a mesh such as {b: 2, m: 4}", source);
  else
    rc = mtf_mesh_from_yaml_node(&doc, root, source, "mesh", mesh, err);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  return rc;
}
