/* One entry point per sub-command; each lives in its own cmd_*.c file.
 * argv[0] is the sub-command's name. Return value is the process exit code. */
#ifndef DF_CLI_COMMANDS_H
#define DF_CLI_COMMANDS_H

int df_cmd_prepare(int argc, char **argv);
int df_cmd_tokenize(int argc, char **argv);
int df_cmd_inspect(int argc, char **argv);
int df_cmd_forward(int argc, char **argv);
int df_cmd_bench(int argc, char **argv);
int df_cmd_train(int argc, char **argv);
int df_cmd_generate(int argc, char **argv);
int df_cmd_eval(int argc, char **argv);
int df_cmd_export(int argc, char **argv);
int df_cmd_plot(int argc, char **argv);

#endif
