/* Layout rules: parsing, every error and warning message (checked text), and slice shapes and offsets,
 * checked by covering the whole tensor with the slices of all ranks. */
#include <stdlib.h>

#include "check.h"
#include "core/layout.h"

static mtf_shape shape_of(const char *text) {
  mtf_shape s;
  mtf_error err;
  if (mtf_shape_parse(text, "test shape", &s, &err) != MTF_OK) {
    fprintf(stderr, "bad test shape: %s\n", err.msg);
    exit(2);
  }
  return s;
}

static void test_parse(void) {
  mtf_layout_rules rules;
  mtf_error err;
  CHECK(mtf_layout_rules_parse("batch:b;d_ff:m;heads:m;vocab:m", &rules, &err) == MTF_OK);
  CHECK(rules.count == 4);
  CHECK(strcmp(rules.rules[2].dim, "heads") == 0 && strcmp(rules.rules[2].axis, "m") == 0);
  char buf[256];
  CHECK(strcmp(mtf_layout_rules_format(&rules, buf, sizeof buf), "batch:b;d_ff:m;heads:m;vocab:m") == 0);
  CHECK(mtf_layout_rules_parse("batch:b, d_ff:m vocab:m", &rules, &err) == MTF_OK && rules.count == 3);
  CHECK(mtf_layout_rules_parse("batch:b;batch:b", &rules, &err) == MTF_OK && rules.count == 1);
  CHECK(mtf_layout_rules_parse("", &rules, &err) == MTF_OK && rules.count == 0);
  CHECK(mtf_layout_rules_parse("batch", &rules, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "layout rules 'batch'", "item 'batch' has no ':'", "'batch:m'");
  CHECK(mtf_layout_rules_parse("batch:b;d-ff:m", &rules, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "layout rules 'batch:b;d-ff:m'", "'d-ff' is not a valid dimension name");
  CHECK(mtf_layout_rules_parse("batch:", &rules, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "'' is not a valid mesh axis name");
}

static void test_errors(void) {
  mtf_shape mesh;
  mtf_mesh_parse("b:2;m:4", &mesh, NULL);
  mtf_layout_rules rules;
  mtf_tensor_layout layout;
  mtf_error err;

  /* One tensor dimension mapped to two mesh axes. */
  mtf_layout_rules_parse("d_ff:m;d_ff:b", &rules, NULL);
  mtf_shape wi = shape_of("d_model:512;d_ff:2048");
  CHECK(mtf_tensor_layout_make(&rules, &mesh, "layer_000/mlp/wi", &wi, &layout, &err) == MTF_ERR_LAYOUT);
  CHECK_CONTAINS(err.msg, "tensor 'layer_000/mlp/wi' [d_model:512, d_ff:2048]",
                 "dimension 'd_ff' (size 2048) is mapped to two mesh axes, 'm' (size 4) and 'b' (size 2)",
                 "keep one of the rules 'd_ff:m' and 'd_ff:b'");

  /* Two dimensions of one tensor mapped to the same mesh axis. */
  mtf_layout_rules_parse("batch:b;heads:m;d_ff:m", &rules, NULL);
  mtf_shape h = shape_of("batch:8;heads:8;d_ff:64");
  CHECK(mtf_tensor_layout_make(&rules, &mesh, "attn/h", &h, &layout, &err) == MTF_ERR_LAYOUT);
  CHECK_CONTAINS(err.msg, "tensor 'attn/h' [batch:8, heads:8, d_ff:64]",
                 "dimensions 'heads' (size 8) and 'd_ff' (size 64) are both mapped to mesh axis 'm' (size 4)",
                 "map one of them to another mesh axis, or drop the rule 'heads:m' or 'd_ff:m'");

  /* A mesh axis that does not divide the dimension it splits. */
  mtf_layout_rules_parse("batch:b;vocab:m", &rules, NULL);
  mtf_shape logits = shape_of("batch:8;vocab:1030");
  CHECK(mtf_tensor_layout_make(&rules, &mesh, "logits", &logits, &layout, &err) == MTF_ERR_LAYOUT);
  CHECK_CONTAINS(err.msg, "tensor 'logits' [batch:8, vocab:1030]",
                 "dimension 'vocab' (size 1030) is split over mesh axis 'm' (size 4), which does not divide it "
                 "(1030 % 4 = 2)",
                 "make 'vocab' a multiple of 4, or map it to another mesh axis, or drop the rule 'vocab:m'");

  /* A rule for an axis that is not in the mesh: a warning, and the rule is ignored. */
  mtf_layout_rules_parse("batch:b;vocab:model;d_ff:m", &rules, NULL);
  mtf_warnings warnings = {0};
  mtf_layout_rules_check_mesh(&rules, &mesh, &warnings);
  CHECK(warnings.count == 1);
  CHECK_CONTAINS(warnings.msg[0], "layout rule 'vocab:model' names mesh axis 'model', which is not in mesh "
                                  "[b:2, m:4] (its axes: b, m)",
                 "the rule is ignored and 'vocab' is not split", "fix the axis name or drop the rule");
  CHECK(mtf_tensor_layout_make(&rules, &mesh, "logits", &logits, &layout, &err) == MTF_OK);
  CHECK(layout.mesh_axis[0] == 0 && layout.mesh_axis[1] == -1);

  /* An unknown axis does not count as a second mapping. */
  mtf_layout_rules_parse("d_ff:m;d_ff:zz", &rules, NULL);
  CHECK(mtf_tensor_layout_make(&rules, &mesh, "wi", &wi, &layout, &err) == MTF_OK);
  mtf_warnings many = {0};
  mtf_shape empty_mesh;
  mtf_mesh_parse("", &empty_mesh, NULL);
  mtf_layout_rules_check_mesh(&rules, &empty_mesh, &many);
  CHECK(many.count == 2);
  CHECK_CONTAINS(many.msg[0], "(its axes: none)");
}

/* Every element of the tensor must be held by exactly (mesh size / split group size) ranks, once each. */
static void check_tiling(const char *mesh_text, const char *rules_text, const char *shape_text, const char *split) {
  mtf_shape mesh, shape = shape_of(shape_text);
  mtf_mesh_parse(mesh_text, &mesh, NULL);
  mtf_layout_rules rules;
  mtf_layout_rules_parse(rules_text, &rules, NULL);
  mtf_tensor_layout layout;
  mtf_error err;
  CHECK(mtf_tensor_layout_make(&rules, &mesh, "t", &shape, &layout, &err) == MTF_OK);
  char buf[64];
  CHECK(strcmp(mtf_mesh_axis_set_format(&mesh, mtf_layout_split_axes(&layout), buf, sizeof buf), split) == 0);
  mtf_shape slice = mtf_layout_slice_shape(&layout, &mesh);
  int64_t total = mtf_shape_num_elements(&shape), slice_elems = mtf_shape_num_elements(&slice);
  int replicas = mtf_mesh_size(&mesh) / mtf_mesh_group_size(&mesh, mtf_layout_split_axes(&layout));
  CHECK(slice_elems * mtf_mesh_size(&mesh) == total * replicas);
  int *covered = calloc((size_t)total, sizeof(int));
  for (int r = 0; r < mtf_mesh_size(&mesh); r++) {
    int coord[MTF_MAX_MESH_AXES];
    int64_t offset[MTF_MAX_RANK];
    mtf_mesh_rank_to_coord(&mesh, r, coord);
    mtf_layout_slice_offset(&layout, &mesh, coord, offset);
    for (int64_t e = 0; e < slice_elems; e++) {
      int64_t rest = e, flat = 0, index[MTF_MAX_RANK];
      for (int d = slice.rank - 1; d >= 0; d--) {
        index[d] = rest % slice.dims[d].size;
        rest /= slice.dims[d].size;
      }
      for (int d = 0; d < shape.rank; d++) flat = flat * shape.dims[d].size + offset[d] + index[d];
      covered[flat]++;
    }
  }
  int wrong = 0;
  for (int64_t i = 0; i < total; i++) wrong += covered[i] != replicas;
  CHECK(wrong == 0);
  free(covered);
}

static void test_slices(void) {
  mtf_shape mesh;
  mtf_mesh_parse("b:2;m:4", &mesh, NULL);
  mtf_layout_rules rules;
  mtf_layout_rules_parse("batch:b;d_ff:m", &rules, NULL);
  mtf_shape h = shape_of("batch:8;length:3;d_ff:16");
  mtf_tensor_layout layout;
  CHECK(mtf_tensor_layout_make(&rules, &mesh, "h", &h, &layout, NULL) == MTF_OK);
  mtf_shape slice = mtf_layout_slice_shape(&layout, &mesh);
  char buf[MTF_SHAPE_STR_MAX];
  CHECK(strcmp(mtf_shape_format(&slice, buf, sizeof buf), "[batch:4, length:3, d_ff:4]") == 0);
  int coord[MTF_MAX_MESH_AXES] = {1, 3};
  int64_t offset[MTF_MAX_RANK];
  mtf_layout_slice_offset(&layout, &mesh, coord, offset);
  CHECK(offset[0] == 4 && offset[1] == 0 && offset[2] == 12);

  check_tiling("b:2;m:4", "batch:b;d_ff:m", "batch:8;length:3;d_ff:16", "{b,m}");
  check_tiling("b:2;m:4", "d_ff:m", "batch:8;d_ff:16", "{m}");
  check_tiling("b:2;m:4", "batch:b", "d_ff:16;batch:6", "{b}");
  check_tiling("b:2;m:4", "", "d_model:5", "{}");
  check_tiling("a:2;b:3;c:2", "x:c;y:a;z:b", "z:6;y:4;x:2;w:3", "{a,b,c}");
  check_tiling("m:4", "vocab:m", "vocab:256;d_model:8", "{m}");
}

int main(void) {
  test_parse();
  test_errors();
  test_slices();
  return check_summary();
}
