// Preloaded into one gyred by daemon_socket_test: a process that can have no more threads
// (RLIMIT_NPROC, the kernel's task limit, no address space for a stack), after start-up only.
// pthread_create fails with EAGAIN when called from any thread but the main one, so the
// daemon joins and listens (its main thread starts those threads), and the first thread a
// client connection wants, its heartbeat, is refused, as the system would refuse it.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*),
                              void* arg) {
  if (::syscall(SYS_gettid) != ::getpid()) return EAGAIN;
  using CreateFn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static CreateFn real = reinterpret_cast<CreateFn>(::dlsym(RTLD_NEXT, "pthread_create"));
  if (real == nullptr) return ENOSYS;
  return real(thread, attr, start, arg);
}
