/* The processor mesh: named axes with sizes (`b:2;m:4`), an mtf_shape whose dimensions are mesh axes.
 * Ranks are numbered row-major over the axes (the last axis varies fastest), as in Mesh TensorFlow.
 * A set of mesh axes is a bitmask (bit i = axis i). For a set S, the ranks that differ only in their
 * coordinates along S form one group; every rank belongs to exactly one group per S. Groups are
 * numbered row-major over the axes outside S, and members row-major over the axes in S. Pure C, no MPI. */
#ifndef MTF_CORE_MESH_H
#define MTF_CORE_MESH_H

#include <stdint.h>

#include "core/error.h"
#include "core/shape.h"

#define MTF_MAX_MESH_AXES 6
/* The most ranks a mesh may have: rank numbers and group sizes are ints, and no job is larger. */
#define MTF_MAX_MESH_SIZE (1 << 24)

typedef unsigned mtf_axis_set;

/* Parses a mesh shape string; the empty string is the one-process mesh. */
int mtf_mesh_parse(const char *text, mtf_shape *mesh, mtf_error *err);

/* Checks that a shape is usable as a mesh (at most MTF_MAX_MESH_AXES axes, at most MTF_MAX_MESH_SIZE ranks). */
int mtf_mesh_validate(const mtf_shape *mesh, mtf_error *err);

int mtf_mesh_size(const mtf_shape *mesh);
mtf_axis_set mtf_mesh_all_axes(const mtf_shape *mesh);

void mtf_mesh_rank_to_coord(const mtf_shape *mesh, int rank, int coord[MTF_MAX_MESH_AXES]);
int mtf_mesh_coord_to_rank(const mtf_shape *mesh, const int coord[MTF_MAX_MESH_AXES]);

/* Parses a comma/space-separated list of axis names ("b,m"; "" is the empty set). */
int mtf_mesh_axis_set_parse(const mtf_shape *mesh, const char *text, mtf_axis_set *out, mtf_error *err);
/* Writes "{b,m}" into buf; returns buf. */
const char *mtf_mesh_axis_set_format(const mtf_shape *mesh, mtf_axis_set axes, char *buf, size_t size);

int mtf_mesh_group_size(const mtf_shape *mesh, mtf_axis_set axes);
int mtf_mesh_group_count(const mtf_shape *mesh, mtf_axis_set axes);
/* Which group of `axes` the rank at coord belongs to, and its position within that group. */
int mtf_mesh_group_index(const mtf_shape *mesh, mtf_axis_set axes, const int coord[MTF_MAX_MESH_AXES]);
int mtf_mesh_group_position(const mtf_shape *mesh, mtf_axis_set axes, const int coord[MTF_MAX_MESH_AXES]);
/* The ranks of the group containing `rank`, in member order; ranks_out has group_size entries. */
void mtf_mesh_group_ranks(const mtf_shape *mesh, mtf_axis_set axes, int rank, int *ranks_out);

#endif
