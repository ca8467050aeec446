#include "base/std_fds.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int df_guard_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* open() returns the lowest free number: this one, as the lower ones are open by now */
        int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (got != fd) {
            if (got >= 0) close(got);
            return -1;
        }
    }
    return 0;
}
