/* libFuzzer target: the shape, mesh and layout parsers. The input's lines are (1) a mesh shape
 * (`b:2;m:4`), (2) layout rules (`batch:b;d_ff:m`), (3) a tensor shape (`batch:8,d_ff:16`), (4) mesh axes
 * (`b,m`) and (5) a tensor name; when they parse, the tensor's layout, its slice shape and the slice
 * offset at every mesh coordinate (up to 256 ranks) are derived. The whole input is also read as a YAML
 * mesh (mtf_mesh_parse_yaml). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "core/mesh.h"
#include "core/mesh_yaml.h"
#include "core/shape.h"

#define FIELDS 5

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  mtf_error err;

  mtf_shape yaml_mesh;
  mtf_mesh_parse_yaml(text, size, "fuzz.yaml", &yaml_mesh, &err);

  /* The fields, each its own allocation of exactly its length (+ NUL), so an over-read is caught. */
  char *field[FIELDS] = {0};
  const char *p = text, *end = text + size;
  for (int i = 0; i < FIELDS; i++) {
    const char *eol = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
    size_t n = p < end ? (eol ? (size_t)(eol - p) : (size_t)(end - p)) : 0;
    field[i] = malloc(n + 1);
    if (!field[i]) goto done;
    memcpy(field[i], p, n);
    field[i][n] = '\0';
    p += n + (p < end ? 1 : 0);
  }

  mtf_shape mesh, shape, any;
  mtf_layout_rules rules;
  char buf[512];
  mtf_shape_parse(field[0], "fuzz shape", &any, &err);
  if (mtf_mesh_parse(field[0], &mesh, &err) != MTF_OK) goto done;
  mtf_shape_format(&mesh, buf, sizeof buf);
  mtf_axis_set axes;
  if (mtf_mesh_axis_set_parse(&mesh, field[3], &axes, &err) == MTF_OK) {
    mtf_mesh_axis_set_format(&mesh, axes, buf, sizeof buf);
    mtf_mesh_group_size(&mesh, axes);
    mtf_mesh_group_count(&mesh, axes);
  }
  if (mtf_layout_rules_parse(field[1], &rules, &err) != MTF_OK) goto done;
  mtf_layout_rules_format(&rules, buf, sizeof buf);
  mtf_warnings warnings;
  memset(&warnings, 0, sizeof warnings);
  mtf_layout_rules_check_mesh(&rules, &mesh, &warnings);
  if (mtf_shape_parse(field[2], "fuzz tensor", &shape, &err) != MTF_OK) goto done;
  mtf_tensor_layout layout;
  if (mtf_tensor_layout_make(&rules, &mesh, field[4], &shape, &layout, &err) != MTF_OK) goto done;
  mtf_layout_split_axes(&layout);
  mtf_layout_slice_shape(&layout, &mesh);
  int ranks = mtf_mesh_size(&mesh);
  for (int r = 0; r < ranks && r < 256; r++) {
    int coord[MTF_MAX_MESH_AXES];
    int64_t offset[MTF_MAX_RANK];
    mtf_mesh_rank_to_coord(&mesh, r, coord);
    mtf_layout_slice_offset(&layout, &mesh, coord, offset);
  }

done:
  for (int i = 0; i < FIELDS; i++) free(field[i]);
  free(text);
  return 0;
}
