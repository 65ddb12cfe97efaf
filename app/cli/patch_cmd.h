#pragma once
// decoderscope-cli patch (app/cli/patch_cmd.cpp): activation patching from the command
// line. Takes the whole command line (argv[1] is "patch") and returns the exit code;
// errors are thrown as ds::Error for main()'s one-line report.
int cmd_patch(int argc, char** argv);
