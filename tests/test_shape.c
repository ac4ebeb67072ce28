/* Named dimensions and shapes: parsing in Mesh TensorFlow's syntax, formatting, and the algebra. */
#include "check.h"
#include "core/shape.h"

static void test_parse_separators(void) {
  const char *texts[] = {"batch:8;d_model:512", "batch:8,d_model:512", "batch:8 d_model:512",
                         "  batch:8 ;, d_model:512 ; "};
  for (int i = 0; i < 4; i++) {
    mtf_shape s;
    mtf_error err;
    CHECK(mtf_shape_parse(texts[i], "tensor shape", &s, &err) == MTF_OK);
    CHECK(s.rank == 2);
    CHECK(strcmp(s.dims[0].name, "batch") == 0 && s.dims[0].size == 8);
    CHECK(strcmp(s.dims[1].name, "d_model") == 0 && s.dims[1].size == 512);
  }
  mtf_shape scalar;
  CHECK(mtf_shape_parse("", "tensor shape", &scalar, NULL) == MTF_OK && scalar.rank == 0);
  CHECK(mtf_shape_num_elements(&scalar) == 1);
}

static void test_parse_errors(void) {
  mtf_shape s;
  mtf_error err;
  CHECK(mtf_shape_parse("batch", "tensor shape", &s, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "tensor shape 'batch'", "item 'batch' has no ':'", "'batch:4'");
  CHECK(mtf_shape_parse("batch:eight", "mesh shape", &s, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "mesh shape 'batch:eight'", "size of 'batch' is 'eight', which is not an integer");
  CHECK(mtf_shape_parse("batch:0", "tensor shape", &s, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "size of 'batch' is 0; sizes must be at least 1");
  CHECK(mtf_shape_parse("batch:-2", "tensor shape", &s, &err) == MTF_ERR_INVALID);
  CHECK(mtf_shape_parse("batch:4x", "tensor shape", &s, &err) == MTF_ERR_PARSE);
  CHECK(mtf_shape_parse("9lives:4", "tensor shape", &s, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "'9lives' is not a valid dimension name");
  CHECK(mtf_shape_parse(":4", "tensor shape", &s, &err) == MTF_ERR_PARSE);
  CHECK(mtf_shape_parse("a:1;b:2;a:3", "tensor shape", &s, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "tensor shape 'a:1;b:2;a:3'", "dimension 'a' appears twice");
  CHECK(mtf_shape_parse("a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1", "tensor shape", &s, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "more than 8 dimensions");
  CHECK(mtf_shape_parse("a:99999999999999999999999", "tensor shape", &s, &err) == MTF_ERR_PARSE);
}

static void test_format_and_lookup(void) {
  mtf_shape s;
  CHECK(mtf_shape_parse("batch:8;length:16;d_model:512", "t", &s, NULL) == MTF_OK);
  char buf[MTF_SHAPE_STR_MAX];
  CHECK(strcmp(mtf_shape_format(&s, buf, sizeof buf), "[batch:8, length:16, d_model:512]") == 0);
  char tiny[8];
  mtf_shape_format(&s, tiny, sizeof tiny);
  CHECK(strlen(tiny) == 7);
  CHECK(mtf_shape_index_of(&s, "length") == 1);
  CHECK(mtf_shape_index_of(&s, "vocab") == -1);
  CHECK(mtf_shape_has(&s, "d_model") && !mtf_shape_has(&s, "d_mode"));
  CHECK(mtf_shape_num_elements(&s) == 8 * 16 * 512);
}

static void test_algebra(void) {
  mtf_shape a, b, out;
  mtf_error err;
  char buf[MTF_SHAPE_STR_MAX];
  mtf_shape_parse("batch:8,length:16", "t", &a, NULL);
  mtf_shape_parse("d_model:512", "t", &b, NULL);
  CHECK(mtf_shape_concat(&a, &b, &out, &err) == MTF_OK);
  CHECK(strcmp(mtf_shape_format(&out, buf, sizeof buf), "[batch:8, length:16, d_model:512]") == 0);
  CHECK(mtf_shape_concat(&out, &a, &out, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "cannot concatenate [batch:8, length:16, d_model:512] and [batch:8, length:16]",
                 "dimension 'batch' appears twice");

  mtf_shape removed;
  CHECK(mtf_shape_remove(&out, "length", &removed, &err) == MTF_OK);
  CHECK(strcmp(mtf_shape_format(&removed, buf, sizeof buf), "[batch:8, d_model:512]") == 0);
  CHECK(mtf_shape_remove(&removed, "length", &removed, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "cannot remove dimension 'length'", "[batch:8, d_model:512] has no such dimension");

  mtf_shape copy = removed;
  CHECK(mtf_shape_equal(&copy, &removed));
  copy.dims[1].size = 256;
  CHECK(!mtf_shape_equal(&copy, &removed));
  CHECK(mtf_shape_append(&copy, "heads", 8, &err) == MTF_OK && copy.rank == 3);
  CHECK(mtf_shape_append(&copy, "heads", 8, &err) == MTF_ERR_INVALID);
  CHECK(mtf_shape_append(&copy, "bad name", 8, &err) == MTF_ERR_INVALID);
  CHECK(mtf_shape_append(&copy, "x", 0, &err) == MTF_ERR_INVALID);
}

static void test_names(void) {
  CHECK(mtf_name_is_valid("d_model"));
  CHECK(mtf_name_is_valid("_x9"));
  CHECK(!mtf_name_is_valid(""));
  CHECK(!mtf_name_is_valid("1x"));
  CHECK(!mtf_name_is_valid("a-b"));
  CHECK(!mtf_name_is_valid("a_name_that_is_far_too_long_for_mtf"));
}

int main(void) {
  test_parse_separators();
  test_parse_errors();
  test_format_and_lookup();
  test_algebra();
  test_names();
  return check_summary();
}
