/* Mesh shapes (string and YAML), rank <-> coordinate, and the groups of every set of mesh axes, checked
 * against a brute-force enumeration written here. */
#include "check.h"
#include "core/mesh.h"
#include "core/mesh_yaml.h"

static void test_parse(void) {
  const char *texts[] = {"b:2;m:4", "b:2,m:4", "b:2 m:4"};
  for (int i = 0; i < 3; i++) {
    mtf_shape mesh;
    CHECK(mtf_mesh_parse(texts[i], &mesh, NULL) == MTF_OK);
    CHECK(mesh.rank == 2 && mtf_mesh_size(&mesh) == 8);
    CHECK(strcmp(mesh.dims[1].name, "m") == 0 && mesh.dims[1].size == 4);
  }
  mtf_shape mesh;
  mtf_error err;
  CHECK(mtf_mesh_parse("", &mesh, &err) == MTF_OK && mtf_mesh_size(&mesh) == 1);
  CHECK(mtf_mesh_parse("b:2;m", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "mesh shape 'b:2;m'", "item 'm' has no ':'");
  CHECK(mtf_mesh_parse("a:1;b:1;c:1;d:1;e:1;f:1;g:1", &mesh, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "has 7 axes; at most 6 are supported");
}

static void test_yaml(void) {
  mtf_shape mesh;
  mtf_error err;
  const char *mapping = "b: 2\nm: 4\n";
  CHECK(mtf_mesh_parse_yaml(mapping, strlen(mapping), "mesh.yaml", &mesh, &err) == MTF_OK);
  char buf[MTF_SHAPE_STR_MAX];
  CHECK(strcmp(mtf_shape_format(&mesh, buf, sizeof buf), "[b:2, m:4]") == 0);
  const char *flow = "{rows: 4, cols: 2, x: 1}";
  CHECK(mtf_mesh_parse_yaml(flow, strlen(flow), "mesh.yaml", &mesh, &err) == MTF_OK);
  CHECK(strcmp(mtf_shape_format(&mesh, buf, sizeof buf), "[rows:4, cols:2, x:1]") == 0);
  const char *scalar = "\"b:2;m:2\"";
  CHECK(mtf_mesh_parse_yaml(scalar, strlen(scalar), "mesh.yaml", &mesh, &err) == MTF_OK && mesh.rank == 2);

  const char *bad_size = "b: 2\nm: four\n";
  CHECK(mtf_mesh_parse_yaml(bad_size, strlen(bad_size), "run.yaml", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "run.yaml:2:4: mesh: size of mesh axis 'm' is 'four', which is not an integer");
  const char *zero = "b: 2\nm: 0\n";
  CHECK(mtf_mesh_parse_yaml(zero, strlen(zero), "run.yaml", &mesh, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "run.yaml:2:1: mesh: mesh axis", "sizes must be at least 1");
  const char *twice = "b: 2\nb: 4\n";
  CHECK(mtf_mesh_parse_yaml(twice, strlen(twice), "run.yaml", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "run.yaml:2:1", "duplicate key 'b'");
  const char *list = "- 2\n- 4\n";
  CHECK(mtf_mesh_parse_yaml(list, strlen(list), "run.yaml", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "run.yaml:1:1: mesh: a mesh shape is a mapping", "not a list");
  const char *nested = "b: {x: 1}\n";
  CHECK(mtf_mesh_parse_yaml(nested, strlen(nested), "run.yaml", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "size of mesh axis 'b' must be an integer, not a mapping");
  const char *broken = "b: 2\n  m: [4\n";
  CHECK(mtf_mesh_parse_yaml(broken, strlen(broken), "run.yaml", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "run.yaml:", "YAML syntax error");
  CHECK(mtf_mesh_parse_yaml("", 0, "run.yaml", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "empty document");
  const char *bad_string = "\"b:2;m:x\"";
  CHECK(mtf_mesh_parse_yaml(bad_string, strlen(bad_string), "run.yaml", &mesh, &err) == MTF_ERR_PARSE);
  CHECK_CONTAINS(err.msg, "run.yaml:1:1: mesh: mesh shape 'b:2;m:x'");
}

/* Independent reference: coordinates by repeated division, the last axis fastest. */
static void reference_coord(const mtf_shape *mesh, int rank, int *coord) {
  int stride = mtf_mesh_size(mesh);
  for (int a = 0; a < mesh->rank; a++) {
    stride /= (int)mesh->dims[a].size;
    coord[a] = (rank / stride) % (int)mesh->dims[a].size;
  }
}

static void test_coords_and_groups(const char *mesh_text) {
  mtf_shape mesh;
  CHECK(mtf_mesh_parse(mesh_text, &mesh, NULL) == MTF_OK);
  int size = mtf_mesh_size(&mesh);
  for (int r = 0; r < size; r++) {
    int coord[MTF_MAX_MESH_AXES], ref[MTF_MAX_MESH_AXES];
    mtf_mesh_rank_to_coord(&mesh, r, coord);
    reference_coord(&mesh, r, ref);
    CHECK(memcmp(coord, ref, sizeof(int) * (size_t)mesh.rank) == 0);
    CHECK(mtf_mesh_coord_to_rank(&mesh, coord) == r);
  }
  for (mtf_axis_set axes = 0; axes <= mtf_mesh_all_axes(&mesh); axes++) {
    int group_size = mtf_mesh_group_size(&mesh, axes);
    CHECK(group_size * mtf_mesh_group_count(&mesh, axes) == size);
    int seen_groups[64] = {0};
    for (int r = 0; r < size; r++) {
      /* Brute force: the ranks that agree with r on every axis outside the set, ascending. */
      int rc[MTF_MAX_MESH_AXES], members[64], n = 0;
      reference_coord(&mesh, r, rc);
      for (int q = 0; q < size; q++) {
        int qc[MTF_MAX_MESH_AXES], same = 1;
        reference_coord(&mesh, q, qc);
        for (int a = 0; a < mesh.rank; a++)
          if (!(axes & (1u << a)) && qc[a] != rc[a]) same = 0;
        if (same) members[n++] = q;
      }
      CHECK(n == group_size);
      int ranks[64];
      mtf_mesh_group_ranks(&mesh, axes, r, ranks);
      CHECK(memcmp(ranks, members, sizeof(int) * (size_t)n) == 0);
      int position = mtf_mesh_group_position(&mesh, axes, rc);
      CHECK(position >= 0 && position < n && members[position] == r);
      int index = mtf_mesh_group_index(&mesh, axes, rc);
      CHECK(index >= 0 && index < mtf_mesh_group_count(&mesh, axes));
      /* The group index is shared by exactly the members. */
      int qc0[MTF_MAX_MESH_AXES];
      reference_coord(&mesh, members[0], qc0);
      CHECK(mtf_mesh_group_index(&mesh, axes, qc0) == index);
      seen_groups[index]++;
    }
    for (int g = 0; g < mtf_mesh_group_count(&mesh, axes); g++) CHECK(seen_groups[g] == group_size);
  }
}

static void test_axis_sets(void) {
  mtf_shape mesh;
  mtf_mesh_parse("b:2;m:4;x:1", &mesh, NULL);
  mtf_axis_set axes;
  mtf_error err;
  CHECK(mtf_mesh_axis_set_parse(&mesh, "m,b", &axes, &err) == MTF_OK && axes == 3u);
  CHECK(mtf_mesh_axis_set_parse(&mesh, "", &axes, &err) == MTF_OK && axes == 0u);
  CHECK(mtf_mesh_axis_set_parse(&mesh, "b,q", &axes, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "'q' is not an axis of mesh [b:2, m:4, x:1]");
  char buf[64];
  CHECK(strcmp(mtf_mesh_axis_set_format(&mesh, 5u, buf, sizeof buf), "{b,x}") == 0);
  CHECK(strcmp(mtf_mesh_axis_set_format(&mesh, 0u, buf, sizeof buf), "{}") == 0);
}

int main(void) {
  test_parse();
  test_yaml();
  test_coords_and_groups("m:4");
  test_coords_and_groups("b:2;m:2");
  test_coords_and_groups("a:2;b:3;c:2");
  test_coords_and_groups("x:1;y:4;z:1");
  test_coords_and_groups("");
  test_axis_sets();
  return check_summary();
}
