#pragma once
// decoderscope-cli train / eval / batch (app/cli/train_cmds.cpp). Each takes the
// whole command line (argv[1] is the command name) and returns the exit code; errors
// are thrown as ds::Error for main()'s one-line report.
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_batch(int argc, char** argv);
