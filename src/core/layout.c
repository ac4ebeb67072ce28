#include "core/layout.h"

#include <stdio.h>
#include <string.h>

#include "core/pairs.h"

int mtf_layout_rules_add(mtf_layout_rules *rules, const char *dim, const char *axis, mtf_error *err) {
  if (!mtf_name_is_valid(dim))
    return mtf_error_set(err, MTF_ERR_PARSE, "layout rule '%s:%s': '%s' is not a valid dimension name", dim, axis,
                         dim);
  if (!mtf_name_is_valid(axis))
    return mtf_error_set(err, MTF_ERR_PARSE, "layout rule '%s:%s': '%s' is not a valid mesh axis name", dim, axis,
                         axis);
  for (int i = 0; i < rules->count; i++)
    if (strcmp(rules->rules[i].dim, dim) == 0 && strcmp(rules->rules[i].axis, axis) == 0) return MTF_OK;
  if (rules->count >= MTF_MAX_LAYOUT_RULES)
    return mtf_error_set(err, MTF_ERR_INVALID, "layout has more than %d rules", MTF_MAX_LAYOUT_RULES);
  mtf_layout_rule *rule = &rules->rules[rules->count++];
  snprintf(rule->dim, sizeof rule->dim, "%s", dim);
  snprintf(rule->axis, sizeof rule->axis, "%s", axis);
  return MTF_OK;
}

int mtf_layout_rules_parse(const char *text, mtf_layout_rules *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  const char *cursor = text;
  char dim[MTF_PAIR_TOKEN_MAX], axis[MTF_PAIR_TOKEN_MAX];
  int got;
  while ((got = mtf_next_pair(&cursor, text, "layout rules", "m", dim, axis, err)) == 1) {
    int rc = mtf_layout_rules_add(out, dim, axis, err);
    if (rc) return mtf_error_prefix(err, "layout rules '%s'", text);
  }
  return got < 0 ? -got : MTF_OK;
}

const char *mtf_layout_rules_format(const mtf_layout_rules *rules, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < rules->count && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s:%s", i ? ";" : "", rules->rules[i].dim,
                             rules->rules[i].axis);
  return buf;
}

void mtf_mesh_axis_names(const mtf_shape *mesh, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int a = 0; a < mesh->rank && used < size; a++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s", a ? ", " : "", mesh->dims[a].name);
  if (mesh->rank == 0) snprintf(buf, size, "none");
}

void mtf_layout_rules_check_mesh(const mtf_layout_rules *rules, const mtf_shape *mesh, mtf_warnings *warnings) {
  for (int i = 0; i < rules->count; i++) {
    const mtf_layout_rule *rule = &rules->rules[i];
    if (mtf_shape_has(mesh, rule->axis)) continue;
    char mesh_text[MTF_SHAPE_STR_MAX], names[MTF_SHAPE_STR_MAX];
    mtf_mesh_axis_names(mesh, names, sizeof names);
    mtf_warn(warnings,
             "layout rule '%s:%s' names mesh axis '%s', which is not in mesh %s (its axes: %s); the rule is "
             "ignored and '%s' is not split: fix the axis name or drop the rule",
             rule->dim, rule->axis, rule->axis, mtf_shape_format(mesh, mesh_text, sizeof mesh_text), names,
             rule->dim);
  }
}

int mtf_tensor_layout_make(const mtf_layout_rules *rules, const mtf_shape *mesh, const char *tensor_name,
                           const mtf_shape *shape, mtf_tensor_layout *out, mtf_error *err) {
  mtf_tensor_layout layout;
  memset(&layout, 0, sizeof layout);
  layout.shape = *shape;
  char shape_text[MTF_SHAPE_STR_MAX];
  mtf_shape_format(shape, shape_text, sizeof shape_text);

  for (int d = 0; d < shape->rank; d++) {
    const mtf_dim *dim = &shape->dims[d];
    layout.mesh_axis[d] = -1;
    for (int i = 0; i < rules->count; i++) {
      if (strcmp(rules->rules[i].dim, dim->name) != 0) continue;
      int axis = mtf_shape_index_of(mesh, rules->rules[i].axis);
      if (axis < 0) continue; /* warned about by mtf_layout_rules_check_mesh */
      if (layout.mesh_axis[d] >= 0) {
        const mtf_dim *first = &mesh->dims[layout.mesh_axis[d]], *second = &mesh->dims[axis];
        return mtf_error_set(err, MTF_ERR_LAYOUT,
                             "tensor '%s' %s: dimension '%s' (size %lld) is mapped to two mesh axes, '%s' (size "
                             "%lld) and '%s' (size %lld); a dimension can be split over one mesh axis only: keep "
                             "one of the rules '%s:%s' and '%s:%s'",
                             tensor_name, shape_text, dim->name, (long long)dim->size, first->name,
                             (long long)first->size, second->name, (long long)second->size, dim->name, first->name,
                             dim->name, second->name);
      }
      layout.mesh_axis[d] = axis;
    }
  }

  for (int d = 0; d < shape->rank; d++) {
    int axis = layout.mesh_axis[d];
    if (axis < 0) continue;
    const mtf_dim *dim = &shape->dims[d], *mesh_axis = &mesh->dims[axis];
    for (int e = 0; e < d; e++) {
      if (layout.mesh_axis[e] != axis) continue;
      const mtf_dim *other = &shape->dims[e];
      return mtf_error_set(err, MTF_ERR_LAYOUT,
                           "tensor '%s' %s: dimensions '%s' (size %lld) and '%s' (size %lld) are both mapped to "
                           "mesh axis '%s' (size %lld); one mesh axis can split only one dimension of a tensor: "
                           "map one of them to another mesh axis, or drop the rule '%s:%s' or '%s:%s'",
                           tensor_name, shape_text, other->name, (long long)other->size, dim->name,
                           (long long)dim->size, mesh_axis->name, (long long)mesh_axis->size, other->name,
                           mesh_axis->name, dim->name, mesh_axis->name);
    }
    if (dim->size % mesh_axis->size != 0)
      return mtf_error_set(err, MTF_ERR_LAYOUT,
                           "tensor '%s' %s: dimension '%s' (size %lld) is split over mesh axis '%s' (size %lld), "
                           "which does not divide it (%lld %% %lld = %lld): make '%s' a multiple of %lld, or map "
                           "it to another mesh axis, or drop the rule '%s:%s'",
                           tensor_name, shape_text, dim->name, (long long)dim->size, mesh_axis->name,
                           (long long)mesh_axis->size, (long long)dim->size, (long long)mesh_axis->size,
                           (long long)(dim->size % mesh_axis->size), dim->name, (long long)mesh_axis->size,
                           dim->name, mesh_axis->name);
  }
  *out = layout;
  return MTF_OK;
}

mtf_axis_set mtf_layout_split_axes(const mtf_tensor_layout *layout) {
  mtf_axis_set axes = 0;
  for (int d = 0; d < layout->shape.rank; d++)
    if (layout->mesh_axis[d] >= 0) axes |= 1u << layout->mesh_axis[d];
  return axes;
}

mtf_shape mtf_layout_slice_shape(const mtf_tensor_layout *layout, const mtf_shape *mesh) {
  mtf_shape slice = layout->shape;
  for (int d = 0; d < slice.rank; d++)
    if (layout->mesh_axis[d] >= 0) slice.dims[d].size /= mesh->dims[layout->mesh_axis[d]].size;
  return slice;
}

void mtf_layout_slice_offset(const mtf_tensor_layout *layout, const mtf_shape *mesh,
                             const int coord[MTF_MAX_MESH_AXES], int64_t offset[MTF_MAX_RANK]) {
  mtf_shape slice = mtf_layout_slice_shape(layout, mesh);
  for (int d = 0; d < slice.rank; d++) {
    int axis = layout->mesh_axis[d];
    offset[d] = axis >= 0 ? (int64_t)coord[axis] * slice.dims[d].size : 0;
  }
}
