#pragma once
// decoderscope-cli attribute (app/cli/attribute_cmd.cpp): direct logit attribution. Takes
// the whole command line (argv[1] is "attribute") and returns the exit code; errors are
// thrown as ds::Error for main()'s one-line report.
int cmd_attribute(int argc, char** argv);
