/* libdsm: user-space distributed shared memory for ML training.
 *
 * The C API. Every area of shared memory has exactly one writer: the process
 * that allocated it with dsm_alloc(). Its stores are made visible to other
 * processes (which dsm_attach() the area read-only, at the same address) as
 * complete, numbered versions. A store reaches readers if it is logged with
 * dsm_log() (explicit logging, the default) or, in areas allocated with page
 * tracking, by itself: the kernel reports the pages written and the library
 * ships the 64-byte lines that differ from the last version. Versions are
 * published at quiescent points: dsm_service() between steps, or dsm_publish().
 *
 * Every call that can fail returns a dsm_code (DSM_OK == 0, errors < 0);
 * dsm_strerror() names the code and dsm_last_error() gives a message for the
 * calling thread's last failure. Nothing in this library aborts the caller.
 *
 * This header is ABI version 2 of the library: soname libdsm.so.2. A change of
 * an enum value, a struct layout or a function's signature, or a removed
 * function, takes the next soname.
 */
#ifndef DSM_DSM_H_
#define DSM_DSM_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
typedef enum dsm_code {
  DSM_OK = 0,
  DSM_ERR_INVALID = -1,       /* bad argument or wrong use of the API */
  DSM_ERR_NO_DAEMON = -2,     /* no dsmd answers on the socket */
  DSM_ERR_EXISTS = -3,        /* an area with that name already exists */
  DSM_ERR_NOT_FOUND = -4,     /* no such area */
  DSM_ERR_NO_SPACE = -5,      /* the host's region or backing memory is full */
  DSM_ERR_TIMEOUT = -6,       /* the wait ended before the condition held */
  DSM_ERR_BUSY = -7,          /* could not sync now (readers or dsmd hold buffers); retried later */
  DSM_ERR_NOT_INIT = -8,      /* dsm_init() has not been called */
  DSM_ERR_ADDRESS = -9,       /* the fixed region address is taken in this process */
  DSM_ERR_SYSTEM = -10,       /* a system call failed (message has errno text) */
  DSM_ERR_PROTOCOL = -11,     /* the daemon speaks another protocol version */
  DSM_ERR_DAEMON_GONE = -12,  /* the daemon stopped; shared data stays readable */
  DSM_ERR_NOT_OWNER = -13,    /* the caller is not the area's writer */
} dsm_code;

/* Short text for a status code. Never NULL. */
const char *dsm_strerror(int status);

/* Detailed message for the calling thread's most recent failed call: every
 * call that fails sets its own message, and a call that succeeds leaves the
 * message of the failure before it. "" if no call of this thread has failed. */
const char *dsm_last_error(void);

/* ---- Session ------------------------------------------------------------- */

typedef struct dsm_init_opts {
  /* Unix socket of the host's dsmd. NULL: $DSM_SOCKET, else DSM_DEFAULT_SOCKET. */
  const char *socket_path;
  /* How long to wait for the daemon's answers; 0 means 2000 ms. */
  uint32_t connect_timeout_ms;
} dsm_init_opts;

#define DSM_DEFAULT_SOCKET "/run/dsm/dsmd.sock"

/* Connects this process to the local dsmd and reserves the shared region at its
 * fixed address. opts may be NULL. Call once per process. */
int dsm_init(const dsm_init_opts *opts);

/* Publishes what is pending, detaches everything and disconnects. Areas this
 * process wrote stay readable by others at their last version (reported as
 * writer-gone); like dsm_free, it first waits (bounded) for hosts replicating
 * them to hold that version. Pointers into areas become invalid in this process. */
int dsm_fini(void);

/* ---- Areas --------------------------------------------------------------- */

/* How the writer's stores are found (dsm_alloc_opts.tracking). */
typedef enum dsm_tracking {
  DSM_TRACK_LOG = 0,      /* only what dsm_log() records (cheapest; the default) */
  DSM_TRACK_PAGES = 1,    /* plain stores: written pages, diffed line by line at publish */
  DSM_TRACK_LOG_AND_PAGES = 2, /* both: logged lines ship even if their bytes are equal */
} dsm_tracking;

/* How written pages are found in DSM_TRACK_PAGES areas (dsm_alloc_opts.page_tracker).
 * AUTO prefers userfaultfd's asynchronous write-protect (Linux 6.7+, no signal per
 * fault) and falls back to mprotect + a SIGSEGV handler that chains to the
 * program's own handler for faults outside areas. $DSM_PAGE_TRACKER ("uffd" or
 * "mprotect") overrides AUTO. dsm_area_status.page_tracker reports the
 * mechanism in use, UFFD or MPROTECT, or NONE; never AUTO. */
typedef enum dsm_page_tracker {
  DSM_PAGE_TRACKER_NONE = 0,     /* in status: the area tracks no pages (explicit log only) */
  DSM_PAGE_TRACKER_UFFD = 1,     /* userfaultfd WP_ASYNC + PAGEMAP_SCAN */
  DSM_PAGE_TRACKER_MPROTECT = 2, /* mprotect + SIGSEGV; write(2)/read(2) into the area fail with EFAULT */
  DSM_PAGE_TRACKER_AUTO = 3,     /* in dsm_alloc_opts: let the library choose, as above */
} dsm_page_tracker;

/* Name of a tracker ("none", "uffd-wp-async", "mprotect", "auto"). Never NULL. */
const char *dsm_page_tracker_name(int tracker);

typedef struct dsm_alloc_opts {
  uint32_t sync_interval_us;   /* 0: the daemon's default (1000 us) */
  uint32_t staleness_bound_ms; /* 0: the daemon's default */
  uint32_t reader_buffers;     /* reader copies per host, 2..4; 0: 2 */
  uint32_t tracking;           /* dsm_tracking; 0: DSM_TRACK_LOG */
  uint32_t page_tracker;       /* dsm_page_tracker AUTO, UFFD or MPROTECT; 0: AUTO */
} dsm_alloc_opts;

/* Allocates a new area named `name` of `size` bytes (rounded up to pages). The
 * caller becomes its single writer; *out receives a read-write pointer at the
 * area's fixed address, valid in every process. opts may be NULL. */
int dsm_alloc(const char *name, size_t size, const dsm_alloc_opts *opts, void **out);

/* ---- Managed areas -------------------------------------------------------- */

/* How a managed area's lines are read to rank their changes. */
typedef enum dsm_element {
  DSM_ELEMENT_FLOAT32 = 1,          /* 16 floats a line: the largest relative change ranks it */
  DSM_ELEMENT_FLOAT32_ABSOLUTE = 2, /* 16 floats a line: the largest absolute change ranks it */
} dsm_element;

typedef struct dsm_managed_opts {
  uint64_t budget_bytes_per_s; /* changed-line bytes per second sent to each other host (> 0) */
  uint32_t max_line_age;       /* versions a line may lag on other hosts (0: none) */
  uint32_t element;            /* dsm_element; 0: DSM_ELEMENT_FLOAT32 */
} dsm_managed_opts;

/* dsm_alloc() of an area whose versions reach other hosts within a bandwidth
 * budget. Each version sent carries, within the budget, the changed lines whose
 * elements changed most from what the other hosts last received (relatively,
 * or in absolute terms with DSM_ELEMENT_FLOAT32_ABSOLUTE: model weights, whose
 * effect scales with the change itself, train better so); the
 * others wait and go later: with budget to spare, or once they would lag more
 * than max_line_age versions, whatever the budget. Lag counts the versions
 * other hosts receive (versions published between two that dsmd sends are one
 * to them). Every version arrives whole, with lines at most that old. Once the
 * writer has stopped changing the area (no change for two of its gaps between
 * changes, and at least four sync intervals), a due publish (dsm_service) makes
 * a version even if nothing changed while lines wait, so other hosts become
 * byte-identical to it within the time the budget takes to send what waits;
 * dsm_free and dsm_fini send what waits first. Processes on the writer's host
 * see every change at once. */
int dsm_alloc_managed(const char *name, size_t size, const dsm_alloc_opts *opts,
                      const dsm_managed_opts *managed, void **out);

typedef struct dsm_managed_status {
  uint8_t managed; /* 0: the area is not managed (the rest is 0) */
  uint32_t max_line_age;
  uint64_t budget_bytes_per_s;
  uint64_t residual_lines; /* changed lines not sent yet, as the writer's host last said */
  uint64_t oldest_lag;     /* versions the oldest of them lags (0: none waits) */
  uint64_t as_of_version;  /* the version those two are as of (0: none sent yet) */
  uint8_t exported;        /* another host reads the area (else nothing waits) */
} dsm_managed_status;

/* Fills *st with how a managed area's versions are sent, on any host. */
int dsm_status_managed(const void *area, dsm_managed_status *st);

/* Attaches the area named `name` read-only at the same address it has in the
 * writer. Waits up to timeout_ms for the area to appear. *out_size may be NULL. */
int dsm_attach(const char *name, uint32_t timeout_ms, const void **out, size_t *out_size);

/* Releases an area: the writer frees it (readers keep their last version until
 * they detach), a reader detaches. `area` is the pointer dsm_alloc/attach gave.
 * A writer whose area other hosts replicate first waits until they hold its
 * last published version (at most $DSM_FREE_DRAIN_MS, default 2000 ms). */
int dsm_free(const void *area);

/* ---- Sync ---------------------------------------------------------------- */

/* The quiescent point. Call it between steps, from every thread that touches
 * areas, when no reference into an area is held across the call. Here this
 * process publishes the areas it writes whose sync interval has elapsed and moves
 * its replicas to the newest complete versions. Cheap when nothing is due. */
int dsm_service(void);

/* Publishes area `area` now, as one new version (if anything was logged). The
 * caller must be at a quiescent point, as for dsm_service(). Returns
 * DSM_ERR_BUSY if every spare buffer is held: by local readers, or by dsmd
 * shipping an earlier version to other hosts (it lets go within one of its
 * turns when asked); the changes stay logged and go out at the next chance.
 * With explicit logging (DSM_TRACK_LOG) the publish gathers the changed
 * lines and hands them to dsmd (unless it runs with --no-stages), which
 * writes them into the reader buffers: the version is numbered and fixed
 * when this returns, and other processes see it moments later
 * (dsm_wait_version() waits). */
int dsm_publish(const void *area);

/* A thread that will not touch areas for a while marks itself offline so that
 * syncs do not wait for it; dsm_thread_online() before touching areas again.
 * A thread that touches areas must have called into the library (dsm_service,
 * dsm_wait_version, dsm_thread_online) first: while every thread that did is
 * offline or asleep in dsm_wait_version, dsmd may write a replica's next
 * version into the buffer this process maps. */
int dsm_thread_offline(void);
int dsm_thread_online(void);

/* ---- Versions and staleness ---------------------------------------------- */

typedef struct dsm_area_status {
  uint64_t version;          /* version this process sees (writer: last published) */
  uint64_t latest_version;   /* newest complete version on this host */
  uint64_t staleness_ns;     /* how long what this process sees may lag the writer */
  uint64_t staleness_bound_ns;
  uint64_t size;             /* bytes */
  int32_t writer_pid;        /* writer's pid on the writer's host */
  uint8_t is_writer;         /* this process is the area's writer */
  uint8_t writer_alive;      /* the writer process is still running */
  uint8_t stale;             /* staleness_ns > bound, or the writer is gone */
  uint8_t freed;             /* the writer freed the area; this is its last version */
  uint64_t publishes_deferred; /* publishes postponed because readers held buffers */
  uint8_t tracking;          /* dsm_tracking of the area (as its writer chose) */
  uint8_t page_tracker;      /* dsm_page_tracker in use: UFFD, MPROTECT, or NONE (never AUTO) */
  uint64_t pages_written;    /* pages the tracker reported written, all publishes */
  uint64_t lines_changed;    /* lines of those pages whose bytes differed: what shipped */
} dsm_area_status;

/* Sets *version to the version this process sees of `area` (the writer: its
 * last published one; 0 before the first publish). Returns DSM_OK, or
 * DSM_ERR_INVALID if `area` is not in an area of this process or version is
 * NULL, DSM_ERR_NOT_INIT before dsm_init(); *version is written only on success. */
int dsm_get_version(const void *area, uint64_t *version);

/* dsm_get_version() for a pointer known to be good: returns the version, or 0
 * on error (then dsm_last_error() says why). 0 is also the version before the
 * first publish, so where `area` may be wrong, use dsm_get_version(). */
uint64_t dsm_version(const void *area);

/* Fills *st with the area's version and staleness as seen by this process. */
int dsm_status(const void *area, dsm_area_status *st);

/* Blocks until this process sees version >= v of `area` (moving its replica
 * forward as versions arrive) or timeout_ms passes (DSM_ERR_TIMEOUT). A thread
 * waiting here counts as quiescent. It sleeps until a version of any area this
 * process reads arrives or one of its writer areas' syncs is due, and does
 * those syncs while it waits. */
int dsm_wait_version(const void *area, uint64_t v, uint32_t timeout_ms);

/* ---- Write logging ------------------------------------------------------- */

/* Lines are 64 bytes. Each writer thread logs into a log of its own, one bit
 * per line plus one summary byte per 512 lines (a 64-byte line of bits): plain
 * stores, no atomics, and no bit lost to another thread. A publish gathers
 * every thread's log. A log takes 1/512 of the area's size; a thread that
 * exits leaves its log to the next thread that logs to the area, and
 * dsm_free() releases them all. */
#define DSM_LINE_SHIFT 6
#define DSM_LINES_PER_PAGE_SHIFT 6
#define DSM_LINES_PER_SUMMARY_SHIFT 9

/* Per-thread cache of the last area logged to, so dsm_log() is a few stores.
 * Filled by the library's slow path; emptied when the area is freed. */
typedef struct dsm_log_cache {
  uintptr_t base;   /* area address */
  uintptr_t size;   /* area bytes; 0 = empty cache */
  uint8_t *bits;    /* this thread's log: line n is bit n % 8 of byte n / 8 */
  uint8_t *summary; /* one byte per 512 lines */
} dsm_log_cache;

/* __thread rather than thread_local: no initialization guard on the fast path. */
extern __thread dsm_log_cache dsm__tls_log_cache __attribute__((tls_model("initial-exec")));

int dsm__log_slow(const void *ptr, size_t len);
/* Marks lines first..last (first < last) in the calling thread's cached log. */
void dsm__log_lines(uintptr_t first, uintptr_t last);

/* Marks one line in a log laid out as dsm_log_cache describes. The store is
 * skipped when the bit is set already: a line written over and over costs a
 * load. (The library marks lines with this too.) */
static inline void dsm__mark_line(uint8_t *bits, uint8_t *summary, uintptr_t line) {
  uint8_t *b = bits + (line >> 3);
  const uint8_t bit = (uint8_t)(1u << (line & 7));
  if (!(*b & bit)) {
    *b = (uint8_t)(*b | bit);
    summary[line >> DSM_LINES_PER_SUMMARY_SHIFT] = 1;
  }
}

/* Records that [ptr, ptr+len) was written, so it is part of the next version.
 * Only the writer of an area may log; other pointers get DSM_ERR_INVALID. */
static inline int dsm_log(const void *ptr, size_t len) {
  dsm_log_cache *c = &dsm__tls_log_cache;
  uintptr_t off = (uintptr_t)ptr - c->base;
  if (__builtin_expect(off < c->size && len - 1 < c->size - off, 1)) {
    uintptr_t first = off >> DSM_LINE_SHIFT;
    uintptr_t last = (off + len - 1) >> DSM_LINE_SHIFT;
    if (__builtin_expect(first == last, 1)) {
      dsm__mark_line(c->bits, c->summary, first);
    } else {
      dsm__log_lines(first, last);
    }
    return DSM_OK;
  }
  return dsm__log_slow(ptr, len);
}

#ifdef __cplusplus
}
#endif

#endif /* DSM_DSM_H_ */
