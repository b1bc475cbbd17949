/* Replaying the commands a document gives (README sections, config
 * comments) so that a test runs exactly what a reader is told to run. */
#ifndef SPRY_TEST_REPLAY_H
#define SPRY_TEST_REPLAY_H

#include <stddef.h>

/* The lines of text[0..len) that start with `lead` (after any indentation),
 * lead included, and with a trailing `#` comment cut off: a NULL-terminated
 * array of malloc'd strings (sp_test_commands_free). */
char **sp_test_commands(const char *text, size_t len, const char *lead);
void sp_test_commands_free(char **cmds);
/* Runs cmd with `sh -c` in the folder cwd, `build/spry` at its start replaced
 * by $SPRY_BIN, stdout and stderr into out (extra appended to the command
 * line when not NULL). Returns the exit code (128 + N for a signal). */
int sp_test_replay(const char *cwd, const char *cmd, const char *extra, char *out, size_t n);

/* A miniature UCF-101 tree under root in UCF's published layout:
 * data/UCF-101/<Class>/v_<Class>_gGG_c01.avi (4 classes, short synthetic
 * clips) and data/ucfTrainTestlist/ with classInd.txt (`1 Name`),
 * trainlist01.txt (labels 1..4) and testlist01.txt (no labels); also an
 * empty root/configs. Fails the test on error. */
void sp_test_ucf_tree(const char *root);

#endif
