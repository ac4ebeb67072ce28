/* A mesh shape written in YAML: either a mapping of axis name to size (`{b: 2, m: 4}`, order kept) or
 * a string in Mesh TensorFlow's syntax (`"b:2;m:4"`). Errors point at source:line:column. */
#ifndef MTF_CORE_MESH_YAML_H
#define MTF_CORE_MESH_YAML_H

#include <stddef.h>
#include <yaml.h>

#include "core/error.h"
#include "core/layout.h"
#include "core/shape.h"

/* `source` names the file in messages, `key` the config key ("mesh.shape"). */
int mtf_mesh_from_yaml_node(yaml_document_t *doc, yaml_node_t *node, const char *source, const char *key,
                            mtf_shape *mesh, mtf_error *err);

/* Parses a whole YAML text whose root is the mesh (mapping or string). */
int mtf_mesh_parse_yaml(const char *text, size_t length, const char *source, mtf_shape *mesh, mtf_error *err);

/* Reads the `mesh` section of a YAML config file: `mesh.shape` (mapping or string, required) and
 * `mesh.layout` (rules string, optional). Other top-level sections are left to their own readers;
 * an unknown key inside `mesh` is an error. */
int mtf_mesh_config_load(const char *path, mtf_shape *mesh, mtf_layout_rules *rules, mtf_error *err);

#endif
