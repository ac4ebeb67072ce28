#!/bin/sh
# The rules of src/exec/cuda/cuda_kernel.h that let the emulator run the CUDA sources as a GPU would, checked
# in every .cu and .h of a directory: launches only through MTF_LAUNCH (no <<< >>> outside cuda_kernel.h),
# dynamic shared memory only through MTF_DYNAMIC_SHARED, and no warp intrinsics, cooperative groups, inline
# PTX or textures. Prints each offending line (file:line) and exits 1 when there is one.
#   check_cuda_rules.sh DIR
dir=${1:?usage: check_cuda_rules.sh DIR}
status=0
for f in "$dir"/*.cu "$dir"/*.h; do
  [ -e "$f" ] || continue
  case "$(basename "$f")" in cuda_kernel.h) continue ;; esac
  found=$(grep -nE '<<<|extern +__shared__|__shfl|__ballot|__any_sync|__all_sync|__activemask|cooperative_groups|cudaLaunchCooperativeKernel|\basm *(volatile *)?\(|cudaTextureObject|tex[123]D|__syncwarp' "$f")
  if [ -n "$found" ]; then
    printf '%s\n' "$found" | sed "s|^|$f:|"
    status=1
  fi
done
[ $status = 0 ] && echo "cuda rules: $dir keeps them"
exit $status
