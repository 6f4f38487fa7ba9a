// The calling thread's last error message, behind dsm_last_error().
#ifndef DSM_LIBDSM_ERRORS_H_
#define DSM_LIBDSM_ERRORS_H_

#include <fmt/format.h>

#include <string>

namespace dsm {

void SetLastError(std::string message);
const char* LastError();
// Moves the message out, leaving the thread with none ("").
std::string TakeLastError();

// Records the message for dsm_last_error() and returns `status`.
template <typename... Args>
int Fail(int status, fmt::format_string<Args...> f, Args&&... args) {
  SetLastError(fmt::format(f, std::forward<Args>(args)...));
  return status;
}

}  // namespace dsm

#endif  // DSM_LIBDSM_ERRORS_H_
