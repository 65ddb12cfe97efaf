// Messages for a class (app/gui/widgets/text.h): absolute paths shortened to file names,
// everything else kept character for character.
#include <gtest/gtest.h>

#include <string>

#include "widgets/text.h"

using dsgui::without_folders;

TEST(WithoutFolders, PathsBecomeFileNamesAndTheRestStays) {
  EXPECT_EQ(without_folders("/home/teacher/lessons/day1.dstrace: not a decoderscope trace: a trace is ..."),
            "day1.dstrace: not a decoderscope trace: a trace is ...");
  EXPECT_EQ(without_folders("cannot open trace file /tmp/x/a b.json"), "cannot open trace file a b.json");
  EXPECT_EQ(without_folders("model \"/srv/models/qwen3/\" has no config.json"), "model \"qwen3/\" has no config.json");
  EXPECT_EQ(without_folders("(/a/b/c.gguf) and /d/e.bin, done"), "(c.gguf) and e.bin, done");
  // No path: unchanged, including fractions, ratios and times of day.
  for (const char* s : {"top-k 5/40 kept", "1/2 of the heads", "step 3 of 10: 12:30", "", "/"})
    EXPECT_EQ(without_folders(s), s);
  // A colon inside a path that is not followed by a space stays part of the path.
  EXPECT_EQ(without_folders("/data/run:2/x.dstrace: bad"), "x.dstrace: bad");
}
