#include "core/mesh_yaml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mesh.h"
#include "core/yaml_load.h"

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
  yaml_document_t doc;
  MTF_CHECK(mtf_yaml_load(text, length, source, &doc, err));
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  int rc;
  if (!root)
    rc = mtf_error_set(err, MTF_ERR_PARSE, "%s: empty document; expected a mesh such as {b: 2, m: 4}", source);
  else
    rc = mtf_mesh_from_yaml_node(&doc, root, source, "mesh", mesh, err);
  yaml_document_delete(&doc);
  return rc;
}

static yaml_node_t *mapping_get(yaml_document_t *doc, yaml_node_t *mapping, const char *key) {
  for (yaml_node_pair_t *pair = mapping->data.mapping.pairs.start; pair < mapping->data.mapping.pairs.top; pair++) {
    yaml_node_t *k = yaml_document_get_node(doc, pair->key);
    if (k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
      return yaml_document_get_node(doc, pair->value);
  }
  return NULL;
}

static int read_mesh_section(yaml_document_t *doc, const char *path, mtf_shape *mesh, mtf_layout_rules *rules,
                             mtf_error *err) {
  yaml_node_t *root = yaml_document_get_root_node(doc);
  if (!root || root->type != YAML_MAPPING_NODE)
    return mtf_error_set(err, MTF_ERR_PARSE, "%s: expected a mapping with a 'mesh' section at the top", path);
  yaml_node_t *section = mapping_get(doc, root, "mesh");
  if (!section)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "%s: no 'mesh' section; add one, e.g.\n  mesh:\n    shape: {b: 2, m: 4}\n    layout: "
                         "\"batch:b;d_ff:m\"",
                         path);
  if (section->type != YAML_MAPPING_NODE)
    return at(err, MTF_ERR_PARSE, path, section, "mesh", "expected a mapping with keys 'shape' and 'layout'");
  for (yaml_node_pair_t *pair = section->data.mapping.pairs.start; pair < section->data.mapping.pairs.top; pair++) {
    yaml_node_t *k = yaml_document_get_node(doc, pair->key);
    const char *name = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "?";
    if (strcmp(name, "shape") != 0 && strcmp(name, "layout") != 0) {
      char what[256];
      snprintf(what, sizeof what, "unknown key '%.64s'; the mesh section has 'shape' and 'layout'", name);
      return at(err, MTF_ERR_INVALID, path, k, "mesh", what);
    }
  }
  yaml_node_t *shape = mapping_get(doc, section, "shape");
  if (!shape)
    return at(err, MTF_ERR_INVALID, path, section, "mesh", "'shape' is missing; add e.g. 'shape: {b: 2, m: 4}'");
  MTF_CHECK(mtf_mesh_from_yaml_node(doc, shape, path, "mesh.shape", mesh, err));
  memset(rules, 0, sizeof *rules);
  yaml_node_t *layout = mapping_get(doc, section, "layout");
  if (!layout) return MTF_OK;
  if (layout->type != YAML_SCALAR_NODE)
    return at(err, MTF_ERR_PARSE, path, layout, "mesh.layout",
              "expected a string of rules such as \"batch:b;d_ff:m\"");
  int rc = mtf_layout_rules_parse((const char *)layout->data.scalar.value, rules, err);
  if (rc)
    return mtf_error_prefix(err, "%s:%zu:%zu: mesh.layout", path, layout->start_mark.line + 1,
                            layout->start_mark.column + 1);
  return MTF_OK;
}

int mtf_mesh_config_load(const char *path, mtf_shape *mesh, mtf_layout_rules *rules, mtf_error *err) {
  char *text = NULL;
  size_t length = 0;
  MTF_CHECK(mtf_yaml_read_file(path, "config", &text, &length, err));
  yaml_document_t doc;
  int rc = mtf_yaml_load(text, length, path, &doc, err);
  if (rc == MTF_OK) {
    rc = read_mesh_section(&doc, path, mesh, rules, err);
    yaml_document_delete(&doc);
  }
  free(text);
  return rc;
}
