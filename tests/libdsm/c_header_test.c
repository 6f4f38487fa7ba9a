/* Compiles the public header as C11 and checks the calls a C program makes
 * before and without a daemon behave as documented. */
#include <stdio.h>
#include <string.h>

#include "dsm/dsm.h"

int main(void) {
  int failures = 0;
  int x = 0;
  if (dsm_service() != DSM_ERR_NOT_INIT) ++failures;
  if (dsm_log(&x, sizeof(x)) != DSM_ERR_NOT_INIT) ++failures;
  if (strstr(dsm_last_error(), "dsm_init") == NULL) ++failures;
  uint64_t v = 7;
  if (dsm_get_version(&x, &v) != DSM_ERR_NOT_INIT || v != 7) ++failures;
  if (DSM_PAGE_TRACKER_AUTO == DSM_PAGE_TRACKER_NONE) ++failures;
  dsm_init_opts opts;
  memset(&opts, 0, sizeof(opts));
  opts.socket_path = "/nonexistent/dsmd.sock";
  if (dsm_init(&opts) != DSM_ERR_NO_DAEMON) ++failures;
  if (strstr(dsm_last_error(), "dsmd") == NULL) ++failures;
  if (strcmp(dsm_strerror(DSM_ERR_TIMEOUT), "timed out") != 0) ++failures;
  printf("c_header_test: %d failure(s); last error: %s\n", failures, dsm_last_error());
  return failures == 0 ? 0 : 1;
}
