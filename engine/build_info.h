// build_info.h — what this pretrain_gpt binary is, for the record: `pretrain_gpt --build-info`
// prints it as JSON and exits, and tracebook's recorder stores it in every run's manifest
// ("engine_build"), so that a replay can rebuild exactly what was built and say why it
// cannot when this host differs.
//
//   {"compiler": "gcc 12.2.0",
//    "cmake": {"CMAKE_BUILD_TYPE": "Release", "TB_SANITIZE": "", "TB_NATIVE": "ON", "CMAKE_C_FLAGS": "",
//              "TB_CUDA": "ON", "CMAKE_CUDA_ARCHITECTURES": "80-real;90", "TB_WITH_MPI": "ON"},
//    "codegen_flags": "-O3 -DNDEBUG -march=native",   // every flag that changes the code
//    "blas": {"library": "OpenBLAS 0.3.21 ...", "kernel": "SkylakeX"},
//    "cpu": {"model": "...", "isa_level": "x86-64-v4", "features": ["avx2", "avx512f", "fma"]}}
//
// TB_CUDA and TB_WITH_MPI are the parts as this build resolved them: ON when the CUDA backend
// (MPI) was built, OFF when it was not; TB_CUDA is AUTO for the toolkit's headers without the
// backend (no nvcc), the one case ON would refuse. CMAKE_CUDA_ARCHITECTURES is "" without it.
//
// isa_level is the x86-64 micro-architecture level the CPU supports (v2: SSE4.2/POPCNT,
// v3: AVX2/FMA/BMI2, v4: AVX-512 F/BW/CD/DQ/VL); with -march=native the compiler targets
// exactly this CPU, so a build on a host of another level is different code.
#ifndef TB_BUILD_INFO_H
#define TB_BUILD_INFO_H

#include <jansson.h>

json_t *build_info_json(void);

#endif
