#!/bin/sh
# on-haswell.sh TEST [ARGS...]: runs a test on OpenBLAS's Haswell kernel (AVX2, the one the AMD
# EPYC hosts run), the second run of each bitwise test (CMakeLists.txt, <test>.haswell). Where
# OPENBLAS_CORETYPE names that kernel already, the test's own run was on it: skipped (77).
if [ "${OPENBLAS_CORETYPE:-}" = Haswell ]; then
  echo "SKIP: OPENBLAS_CORETYPE=Haswell is set already: the test's own run was on the Haswell kernel"
  exit 77
fi
OPENBLAS_CORETYPE=Haswell
export OPENBLAS_CORETYPE
exec "$@"
