// The C++ side of the Python tests: a writer or a reader of a float32 area in
// another process, over the public C API only.
//   dsm_peer write NAME COUNT VALUE  allocates (explicit log), fills with VALUE,
//       publishes, prints "ready ADDRESS VERSION"; then per stdin line "set V"
//       fills with V, publishes and prints "version N"; exits at end of input.
//   dsm_peer dump NAME COUNT VERSION  attaches, waits for VERSION, prints
//       "area ADDRESS VERSION" and the values run-length encoded, "VALUE xN".
// The daemon is the one $DSM_SOCKET names. Exit status 1 with the library's
// message on stderr on any failure.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "dsm/dsm.h"

namespace {

int Fail(const char* what, int rc) {
  std::fprintf(stderr, "dsm_peer: %s: %s: %s\n", what, dsm_strerror(rc), dsm_last_error());
  return 1;
}

int Publish(float* p, size_t count, float value) {
  for (size_t i = 0; i < count; ++i) p[i] = value;
  int rc = dsm_log(p, count * sizeof(float));
  if (rc != DSM_OK) return Fail("dsm_log", rc);
  // A reader may hold every spare buffer for a moment: retry, bounded.
  for (int i = 0; i < 2000; ++i) {
    rc = dsm_publish(p);
    if (rc != DSM_ERR_BUSY) break;
    dsm_service();
  }
  if (rc != DSM_OK) return Fail("dsm_publish", rc);
  return 0;
}

int Write(const char* name, size_t count, float value) {
  void* area = nullptr;
  int rc = dsm_alloc(name, count * sizeof(float), nullptr, &area);
  if (rc != DSM_OK) return Fail("dsm_alloc", rc);
  auto* p = static_cast<float*>(area);
  if (Publish(p, count, value) != 0) return 1;
  std::printf("ready %" PRIuPTR " %" PRIu64 "\n", reinterpret_cast<uintptr_t>(area),
              dsm_version(area));
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.rfind("set ", 0) != 0) continue;
    if (Publish(p, count, std::strtof(line.c_str() + 4, nullptr)) != 0) return 1;
    std::printf("version %" PRIu64 "\n", dsm_version(area));
    std::fflush(stdout);
  }
  rc = dsm_free(area);
  return rc == DSM_OK ? 0 : Fail("dsm_free", rc);
}

int Dump(const char* name, size_t count, uint64_t version) {
  const void* area = nullptr;
  size_t size = 0;
  int rc = dsm_attach(name, 5000, &area, &size);
  if (rc != DSM_OK) return Fail("dsm_attach", rc);
  if (size < count * sizeof(float)) {
    std::fprintf(stderr, "dsm_peer: area has %zu bytes, fewer than %zu floats\n", size, count);
    return 1;
  }
  rc = dsm_wait_version(area, version, 5000);
  if (rc != DSM_OK) return Fail("dsm_wait_version", rc);
  // Nothing below is a quiescent point: the whole dump is of one version.
  uint64_t seen = 0;
  rc = dsm_get_version(area, &seen);
  if (rc != DSM_OK) return Fail("dsm_get_version", rc);
  std::printf("area %" PRIuPTR " %" PRIu64 "\n", reinterpret_cast<uintptr_t>(area), seen);
  const auto* p = static_cast<const float*>(area);
  size_t i = 0;
  while (i < count) {
    size_t j = i + 1;
    while (j < count && std::memcmp(&p[j], &p[i], sizeof(float)) == 0) ++j;
    std::printf("%.9g x%zu\n", static_cast<double>(p[i]), j - i);
    i = j;
  }
  std::fflush(stdout);
  rc = dsm_free(area);
  return rc == DSM_OK ? 0 : Fail("dsm_free", rc);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: dsm_peer write NAME COUNT VALUE | dump NAME COUNT VERSION\n");
    return 2;
  }
  const std::string mode = argv[1];
  const size_t count = std::strtoull(argv[3], nullptr, 10);
  int rc = dsm_init(nullptr);
  if (rc != DSM_OK) return Fail("dsm_init", rc);
  int status = 2;
  if (mode == "write") status = Write(argv[2], count, std::strtof(argv[4], nullptr));
  if (mode == "dump") status = Dump(argv[2], count, std::strtoull(argv[4], nullptr, 10));
  rc = dsm_fini();
  if (rc != DSM_OK && status == 0) return Fail("dsm_fini", rc);
  return status;
}
