// A thread that exists before main and blocks no signal, as the threads a tool injects do (compute-sanitizer's):
// tests/serving/test_serve_scripts.sh preloads it (LD_PRELOAD) into tests/serving/serve_mock, whose SIGTERM must still drain.
#include <pthread.h>
#include <unistd.h>

static void* idle(void* arg) {
    (void)arg;
    for (;;) pause();
    return 0;
}

__attribute__((constructor)) static void start_foreign_thread(void) {
    pthread_t t;
    if (pthread_create(&t, 0, idle, 0) == 0) pthread_detach(t);
}
