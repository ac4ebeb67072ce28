#include "core/mesh.h"

#include <stdio.h>
#include <string.h>

int mtf_mesh_validate(const mtf_shape *mesh, mtf_error *err) {
  if (mesh->rank > MTF_MAX_MESH_AXES) {
    char buf[MTF_SHAPE_STR_MAX];
    return mtf_error_set(err, MTF_ERR_INVALID, "mesh %s has %d axes; at most %d are supported",
                         mtf_shape_format(mesh, buf, sizeof buf), mesh->rank, MTF_MAX_MESH_AXES);
  }
  int64_t ranks = 1;
  for (int a = 0; a < mesh->rank; a++)
    if (!mtf_checked_product(ranks, mesh->dims[a].size, &ranks) || ranks > MTF_MAX_MESH_SIZE) {
      char buf[MTF_SHAPE_STR_MAX];
      return mtf_error_set(err, MTF_ERR_INVALID, "mesh %s has more than %d ranks (the product of its axis sizes); "
                           "no job is that large", mtf_shape_format(mesh, buf, sizeof buf), MTF_MAX_MESH_SIZE);
    }
  return MTF_OK;
}

int mtf_mesh_parse(const char *text, mtf_shape *mesh, mtf_error *err) {
  MTF_CHECK(mtf_shape_parse(text, "mesh shape", mesh, err));
  return mtf_mesh_validate(mesh, err);
}

int mtf_mesh_size(const mtf_shape *mesh) { return (int)mtf_shape_num_elements(mesh); }

mtf_axis_set mtf_mesh_all_axes(const mtf_shape *mesh) { return (1u << mesh->rank) - 1u; }

void mtf_mesh_rank_to_coord(const mtf_shape *mesh, int rank, int coord[MTF_MAX_MESH_AXES]) {
  for (int a = mesh->rank - 1; a >= 0; a--) {
    int size = (int)mesh->dims[a].size;
    coord[a] = rank % size;
    rank /= size;
  }
}

int mtf_mesh_coord_to_rank(const mtf_shape *mesh, const int coord[MTF_MAX_MESH_AXES]) {
  int rank = 0;
  for (int a = 0; a < mesh->rank; a++) rank = rank * (int)mesh->dims[a].size + coord[a];
  return rank;
}

int mtf_mesh_axis_set_parse(const mtf_shape *mesh, const char *text, mtf_axis_set *out, mtf_error *err) {
  mtf_axis_set axes = 0;
  const char *p = text;
  while (*p) {
    while (*p == ',' || *p == ';' || *p == ' ') p++;
    if (!*p) break;
    const char *start = p;
    while (*p && *p != ',' && *p != ';' && *p != ' ') p++;
    char name[MTF_NAME_MAX];
    size_t len = (size_t)(p - start);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, start, len);
    name[len] = '\0';
    int axis = mtf_shape_index_of(mesh, name);
    if (axis < 0) {
      char buf[MTF_SHAPE_STR_MAX];
      return mtf_error_set(err, MTF_ERR_INVALID, "'%s' is not an axis of mesh %s", name,
                           mtf_shape_format(mesh, buf, sizeof buf));
    }
    axes |= 1u << axis;
  }
  *out = axes;
  return MTF_OK;
}

const char *mtf_mesh_axis_set_format(const mtf_shape *mesh, mtf_axis_set axes, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "{");
  int first = 1;
  for (int a = 0; a < mesh->rank && used < size; a++) {
    if (!(axes & (1u << a))) continue;
    used += (size_t)snprintf(buf + used, size - used, "%s%s", first ? "" : ",", mesh->dims[a].name);
    first = 0;
  }
  if (used < size) snprintf(buf + used, size - used, "}");
  return buf;
}

int mtf_mesh_group_size(const mtf_shape *mesh, mtf_axis_set axes) {
  int size = 1;
  for (int a = 0; a < mesh->rank; a++)
    if (axes & (1u << a)) size *= (int)mesh->dims[a].size;
  return size;
}

int mtf_mesh_group_count(const mtf_shape *mesh, mtf_axis_set axes) {
  return mtf_mesh_size(mesh) / mtf_mesh_group_size(mesh, axes);
}

/* Row-major index of coord restricted to the axes in (or out of) `axes`. */
static int restricted_index(const mtf_shape *mesh, mtf_axis_set axes, int inside, const int *coord) {
  int index = 0;
  for (int a = 0; a < mesh->rank; a++) {
    int in_set = (axes & (1u << a)) != 0;
    if (in_set == inside) index = index * (int)mesh->dims[a].size + coord[a];
  }
  return index;
}

int mtf_mesh_group_index(const mtf_shape *mesh, mtf_axis_set axes, const int coord[MTF_MAX_MESH_AXES]) {
  return restricted_index(mesh, axes, 0, coord);
}

int mtf_mesh_group_position(const mtf_shape *mesh, mtf_axis_set axes, const int coord[MTF_MAX_MESH_AXES]) {
  return restricted_index(mesh, axes, 1, coord);
}

void mtf_mesh_group_ranks(const mtf_shape *mesh, mtf_axis_set axes, int rank, int *ranks_out) {
  int base[MTF_MAX_MESH_AXES], coord[MTF_MAX_MESH_AXES];
  mtf_mesh_rank_to_coord(mesh, rank, base);
  int group_size = mtf_mesh_group_size(mesh, axes);
  for (int position = 0; position < group_size; position++) {
    /* Decode position row-major over the axes in the set, keep the others from base. */
    int rest = position;
    for (int a = mesh->rank - 1; a >= 0; a--) {
      if (axes & (1u << a)) {
        coord[a] = rest % (int)mesh->dims[a].size;
        rest /= (int)mesh->dims[a].size;
      } else {
        coord[a] = base[a];
      }
    }
    ranks_out[position] = mtf_mesh_coord_to_rank(mesh, coord);
  }
}
