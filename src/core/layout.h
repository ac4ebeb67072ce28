/* Layout rules in Mesh TensorFlow's syntax (`batch:b;d_ff:m;heads:m;vocab:m`): each rule maps a tensor
 * dimension name to a mesh axis name. A tensor is split along every mesh axis that one of its dimensions
 * maps to and replicated along the others; its layout follows from its dimension names alone.
 * This module also turns a tensor's layout into its slice shape and slice offset at a mesh coordinate. */
#ifndef MTF_CORE_LAYOUT_H
#define MTF_CORE_LAYOUT_H

#include <stdint.h>

#include "core/error.h"
#include "core/mesh.h"
#include "core/shape.h"

#define MTF_MAX_LAYOUT_RULES 32

typedef struct mtf_layout_rule {
  char dim[MTF_NAME_MAX];
  char axis[MTF_NAME_MAX];
} mtf_layout_rule;

typedef struct mtf_layout_rules {
  int count;
  mtf_layout_rule rules[MTF_MAX_LAYOUT_RULES];
} mtf_layout_rules;

int mtf_layout_rules_parse(const char *text, mtf_layout_rules *out, mtf_error *err);
int mtf_layout_rules_add(mtf_layout_rules *rules, const char *dim, const char *axis, mtf_error *err);
/* Writes `batch:b;d_ff:m` into buf; returns buf. */
const char *mtf_layout_rules_format(const mtf_layout_rules *rules, char *buf, size_t size);

/* "b, m" (the mesh's axis names), or "none" for an empty mesh, into buf. */
void mtf_mesh_axis_names(const mtf_shape *mesh, char *buf, size_t size);
/* Warns about every rule whose mesh axis is not in the mesh (such a rule is ignored). */
void mtf_layout_rules_check_mesh(const mtf_layout_rules *rules, const mtf_shape *mesh, mtf_warnings *warnings);

/* The layout of one tensor: for each of its dimensions, the mesh axis splitting it, or -1. */
typedef struct mtf_tensor_layout {
  mtf_shape shape;
  int mesh_axis[MTF_MAX_RANK];
} mtf_tensor_layout;

/* Derives a tensor's layout from its dimension names. Fails, naming the tensor, the dimensions, the sizes
 * and a fix, when a dimension maps to two mesh axes, when two dimensions map to one mesh axis, or when a
 * mesh axis does not divide the dimension it splits. Rules for axes not in the mesh are ignored. */
int mtf_tensor_layout_make(const mtf_layout_rules *rules, const mtf_shape *mesh, const char *tensor_name,
                           const mtf_shape *shape, mtf_tensor_layout *out, mtf_error *err);

/* Mesh axes the tensor is split over; the tensor is replicated over all the other axes. */
mtf_axis_set mtf_layout_split_axes(const mtf_tensor_layout *layout);

/* Shape of the slice every rank holds (the same on every rank). */
mtf_shape mtf_layout_slice_shape(const mtf_tensor_layout *layout, const mtf_shape *mesh);

/* Offset of the slice held at mesh coordinate coord, per tensor dimension. */
void mtf_layout_slice_offset(const mtf_tensor_layout *layout, const mtf_shape *mesh,
                             const int coord[MTF_MAX_MESH_AXES], int64_t offset[MTF_MAX_RANK]);

#endif
