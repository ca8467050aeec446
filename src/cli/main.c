#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/cpu_address_space.h"
#include "backend/select.h"
#include "base/edit_distance.h"
#include "base/std_fds.h"
#include "cli/commands.h"
#include "version.h"

typedef struct Command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} Command;

static const Command COMMANDS[] = {
    /* one line per command, in the order --help lists them: the workflow first */
    {"prepare", "tokenize JSONL records into a token store", df_cmd_prepare},
    {"generate", "the target's responses to prompts, with a KV cache (resumable)", df_cmd_generate},
    {"train", "train a drafter for a target (no arguments: the bundled default run)", df_cmd_train},
    {"eval", "speculative decoding with a drafter: tau, acceptance, speed against greedy", df_cmd_eval},
    {"export", "a training checkpoint as a drafter directory that serving stacks load", df_cmd_export},
    {"plot", "a training run's curves (loss, tau, learning rate, speed, stage times) as one PNG", df_cmd_plot},
    {"bench", "measure the CPU paths' speed next to OpenBLAS sgemm on this machine", df_cmd_bench},
    {"tokenize", "encode JSONL text to token ids (or decode ids)", df_cmd_tokenize},
    {"inspect", "summarize a safetensors file or model directory", df_cmd_inspect},
    {"forward", "run the target on token ids, write tap features (and logits)", df_cmd_forward},
    {NULL, NULL, NULL},
};

static void print_version(void) {
    printf("dflash %s\nbackends: %s\n", DF_VERSION, df_backends_built_in());
    df_print_devices(stdout);
}

static void print_usage(void) {
    printf("dflash: trains DFlash speculative-decoding drafters for Hugging Face targets.\n\n"
           "usage: dflash COMMAND [options]     (dflash COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; COMMANDS[i].name; i++)
        printf("  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    printf("\n  --help     this text\n  --version  version and the compute backends built in\n");
}

/* Output that did not reach standard output (a full disk, a closed pipe,
 * /dev/full) fails the command: a 0 exit would say it was all written. */
static int finish_stdout(int rc) {
    errno = 0;
    int failed = fflush(stdout) != 0 || ferror(stdout);
    if (!failed || rc != 0) return rc; /* a failed command has said why */
    fprintf(stderr, "dflash: writing the standard output failed: %s\n", errno ? strerror(errno) : "write error");
    return rc ? rc : 1;
}

/* "unknown command 'trian'; did you mean 'train'?" when one is a typo away. */
static int unknown_command(const char *word) {
    const char *names[64];
    int n = 0;
    for (size_t i = 0; COMMANDS[i].name && n < 64; i++) names[n++] = COMMANDS[i].name;
    const char *near = df_closest_name(word, strlen(word), names, n);
    if (near) fprintf(stderr, "dflash: unknown command '%s'; did you mean '%s'? (see 'dflash --help')\n", word, near);
    else fprintf(stderr, "dflash: unknown command '%s' (see 'dflash --help')\n", word);
    return 2;
}

int main(int argc, char **argv) {
    /* a closed stdout or stderr would pass its number to the first output opened */
    if (df_guard_std_fds() != 0) return 1;
    /* line by line into a pipe or a log, as on a terminal: a job's log shows each result when it is made */
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* a file-size limit (ulimit -f) makes write() fail with EFBIG, reported by the writer, instead of killing */
    signal(SIGXFSZ, SIG_IGN);
    DfError err = {{0}};
    if (df_address_space_fit(argv, &err) < 0) {
        fprintf(stderr, "dflash: %s\n", err.msg);
        return 1;
    }
    /* dflash help CMD: the command's --help */
    if (argc == 3 && strcmp(argv[1], "help") == 0) {
        char *cmd[] = {argv[2], "--help", NULL};
        for (size_t i = 0; COMMANDS[i].name; i++)
            if (strcmp(argv[2], COMMANDS[i].name) == 0) return finish_stdout(COMMANDS[i].run(2, cmd));
        return unknown_command(argv[2]);
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        print_usage();
        return finish_stdout(0);
    }
    if (strcmp(argv[1], "--version") == 0) {
        print_version();
        return finish_stdout(0);
    }
    for (size_t i = 0; COMMANDS[i].name; i++)
        if (strcmp(argv[1], COMMANDS[i].name) == 0) return finish_stdout(COMMANDS[i].run(argc - 1, argv + 1));
    return unknown_command(argv[1]);
}
