"""What the threads of a threads-pool worker share (harness_site/settings.py): Celery gives each thread
its own result backend unless told the backend is thread-safe, and building one reads every installed
package's entry points (about 45 ms of CPU). An agent worker starts its thousand threads at once."""

import threading

from celery import current_app


def test_every_thread_uses_the_one_result_backend():
    main = current_app.backend
    seen = []
    thread = threading.Thread(target=lambda: seen.append(current_app.backend))
    thread.start()
    thread.join()
    assert seen == [main]
