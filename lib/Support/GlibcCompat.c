/*===- GlibcCompat.c - keep self-contained binaries off glibc 2.36 ----------===//
 *
 * Linked into _mpmd and mpmd-opt only when MLIR/LLVM are linked statically
 * (MPMD_LINK_STATIC_MLIR). Debian's LLVM 22 was configured on glibc 2.36 and its
 * libLLVMSupport.a calls arc4random (new in glibc 2.36) for random numbers (unique
 * temporary file names). This hidden definition satisfies that reference, so the
 * binaries need no symbol newer than GLIBC_2.34 and the wheel can be tagged
 * manylinux_2_34 (RHEL/Alma/Rocky 9, Ubuntu 22.04, Debian 12 and newer).
 *
 *===----------------------------------------------------------------------===*/

#include <errno.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

__attribute__((visibility("hidden"))) uint32_t arc4random(void) {
  uint32_t value = 0;
  unsigned char *out = (unsigned char *)&value;
  size_t got = 0;
  while (got < sizeof value) {
    ssize_t n = getrandom(out + got, sizeof value - got, 0); /* glibc 2.25 */
    if (n > 0) {
      got += (size_t)n;
    } else if (n < 0 && errno != EINTR) {
      /* No getrandom (kernel < 3.17): not cryptographic, only file names. */
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
                   (uint64_t)(uintptr_t)&ts;
      return (uint32_t)(x ^ (x >> 32));
    }
  }
  return value;
}
