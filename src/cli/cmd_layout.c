/* `mtf layout`: what a layout does to named tensors on a mesh, computed in one process. The same checks
 * run before any training, so a layout can be tried here before spending cluster hours. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/layout.h"
#include "core/mesh_yaml.h"

#define MAX_TENSORS 64

static void layout_usage(FILE *out) {
  fprintf(out,
          "usage: mtf layout (--config FILE | --mesh SHAPE) [--layout RULES] --tensor NAME=SHAPE [--tensor ...]\n"
          "                  [--ranks]\n"
          "\n"
          "Shows, for each tensor, the mesh axes it is split over, the slice every rank holds and (with\n"
          "--ranks) each rank's mesh coordinate and slice offset. Runs in one process for any mesh size.\n"
          "\n"
          "  --config FILE        read mesh.shape and mesh.layout from a YAML config (see configs/)\n"
          "  --mesh SHAPE         mesh axes and sizes, e.g. 'b:2;m:4' (';', ',' or space between items)\n"
          "  --layout RULES       tensor-dimension:mesh-axis rules, e.g. 'batch:b;d_ff:m;heads:m;vocab:m'\n"
          "                       (--mesh and --layout override the config's)\n"
          "  --tensor NAME=SHAPE  a tensor and its named shape, e.g. 'ffn/wi=d_model:512,d_ff:2048'\n"
          "  --ranks              also list every rank's coordinate and slice offset\n"
          "  -h, --help           show this help\n"
          "\n"
          "example: mtf layout --mesh 'b:2;m:4' --layout 'batch:b;d_ff:m' --tensor 'h=batch:8,d_ff:2048'\n");
}

static void print_tensor(const mtf_shape *mesh, const mtf_tensor_layout *layout, const char *name, int ranks) {
  char shape_text[MTF_SHAPE_STR_MAX], slice_text[MTF_SHAPE_STR_MAX], split_text[128], replicated_text[128];
  mtf_shape slice = mtf_layout_slice_shape(layout, mesh);
  mtf_axis_set split = mtf_layout_split_axes(layout);
  printf("tensor '%s' %s: split over %s, replicated over %s; slice %s, %lld elements per rank\n", name,
         mtf_shape_format(&layout->shape, shape_text, sizeof shape_text),
         mtf_mesh_axis_set_format(mesh, split, split_text, sizeof split_text),
         mtf_mesh_axis_set_format(mesh, mtf_mesh_all_axes(mesh) & ~split, replicated_text, sizeof replicated_text),
         mtf_shape_format(&slice, slice_text, sizeof slice_text), (long long)mtf_shape_num_elements(&slice));
  if (!ranks) return;
  for (int r = 0; r < mtf_mesh_size(mesh); r++) {
    int coord[MTF_MAX_MESH_AXES];
    int64_t offset[MTF_MAX_RANK];
    mtf_mesh_rank_to_coord(mesh, r, coord);
    mtf_layout_slice_offset(layout, mesh, coord, offset);
    printf("  rank %d (", r);
    for (int a = 0; a < mesh->rank; a++) printf("%s%s=%d", a ? "," : "", mesh->dims[a].name, coord[a]);
    printf("): offset [");
    for (int d = 0; d < layout->shape.rank; d++) printf("%s%lld", d ? ", " : "", (long long)offset[d]);
    printf("]\n");
  }
}

int mtf_cmd_layout(int argc, char **argv) {
  static const struct option options[] = {{"config", required_argument, 0, 'c'},
                                          {"mesh", required_argument, 0, 'm'},
                                          {"layout", required_argument, 0, 'l'},
                                          {"tensor", required_argument, 0, 't'},
                                          {"ranks", no_argument, 0, 'r'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
  const char *config_path = NULL, *mesh_text = NULL, *layout_text = NULL;
  const char *tensor_args[MAX_TENSORS];
  int tensor_count = 0, ranks = 0, opt;
  optind = 1;
  while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
    switch (opt) {
      case 'c': config_path = optarg; break;
      case 'm': mesh_text = optarg; break;
      case 'l': layout_text = optarg; break;
      case 'r': ranks = 1; break;
      case 't':
        if (tensor_count == MAX_TENSORS) {
          fprintf(stderr, "mtf layout: at most %d --tensor options\n", MAX_TENSORS);
          return MTF_EXIT_USAGE;
        }
        tensor_args[tensor_count++] = optarg;
        break;
      case 'h': layout_usage(stdout); return MTF_EXIT_OK;
      default: layout_usage(stderr); return MTF_EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "mtf layout: unexpected argument '%s'\n\n", argv[optind]);
    layout_usage(stderr);
    return MTF_EXIT_USAGE;
  }
  if ((!mesh_text && !config_path) || tensor_count == 0) {
    fprintf(stderr, "mtf layout: %s is required\n\n",
            tensor_count == 0 ? "at least one --tensor" : "--mesh (or --config)");
    layout_usage(stderr);
    return MTF_EXIT_USAGE;
  }

  mtf_error err;
  mtf_shape mesh;
  mtf_layout_rules rules;
  memset(&rules, 0, sizeof rules);
  if ((config_path && mtf_mesh_config_load(config_path, &mesh, &rules, &err)) ||
      (mesh_text && mtf_mesh_parse(mesh_text, &mesh, &err)) ||
      (layout_text && mtf_layout_rules_parse(layout_text, &rules, &err))) {
    fprintf(stderr, "mtf layout: error: %s\n", err.msg);
    return MTF_EXIT_FAILURE;
  }
  mtf_warnings warnings = {0};
  mtf_layout_rules_check_mesh(&rules, &mesh, &warnings);
  for (int i = 0; i < warnings.count && i < MTF_WARNINGS_MAX; i++)
    fprintf(stderr, "mtf layout: warning: %s\n", warnings.msg[i]);

  char text[MTF_SHAPE_STR_MAX], rules_text[MTF_MAX_LAYOUT_RULES * 2 * MTF_NAME_MAX];
  printf("mesh %s, %d ranks; layout '%s'\n", mtf_shape_format(&mesh, text, sizeof text), mtf_mesh_size(&mesh),
         mtf_layout_rules_format(&rules, rules_text, sizeof rules_text));
  int failures = 0;
  for (int i = 0; i < tensor_count; i++) {
    char name[MTF_NAME_MAX * 4];
    const char *equals = strchr(tensor_args[i], '=');
    if (!equals || equals == tensor_args[i] || (size_t)(equals - tensor_args[i]) >= sizeof name) {
      fprintf(stderr, "mtf layout: --tensor '%s' is not NAME=SHAPE (e.g. 'x=batch:8,d_model:512')\n",
              tensor_args[i]);
      return MTF_EXIT_USAGE;
    }
    snprintf(name, sizeof name, "%.*s", (int)(equals - tensor_args[i]), tensor_args[i]);
    mtf_shape shape;
    mtf_tensor_layout layout;
    if (mtf_shape_parse(equals + 1, "tensor shape", &shape, &err) ||
        mtf_tensor_layout_make(&rules, &mesh, name, &shape, &layout, &err)) {
      fprintf(stderr, "mtf layout: error: %s\n", err.msg);
      failures++;
      continue;
    }
    print_tensor(&mesh, &layout, name, ranks);
  }
  return failures ? MTF_EXIT_FAILURE : MTF_EXIT_OK;
}
