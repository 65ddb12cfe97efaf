// Messages for a class (app/gui/widgets/text.h): absolute paths shortened to file names,
// everything else kept character for character.
#include <gtest/gtest.h>

#include <string>

#include "widgets/text.h"

using dsgui::plain_words;
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

TEST(PlainWords, TensorNamesLeaveTheWordsStay) {
  EXPECT_EQ(plain_words("weight tensor blk.0.attn_q.weight holds a NaN at flat index 7"),
            "weight tensor holds a NaN at flat index 7");
  EXPECT_EQ(plain_words("trace tensor L3.attn.pattern has the wrong shape"), "trace tensor has the wrong shape");
  EXPECT_EQ(plain_words("trace tensor L0.lens.ids or L0.lens.probs has the wrong shape"),
            "trace tensor has the wrong shape");
  EXPECT_EQ(plain_words("/m/x.gguf: tensor 'model.layers.2.mlp.up_proj': size 0"), "x.gguf: tensor: size 0");
  // Folders go too; ordinary words after "tensor" stay.
  EXPECT_EQ(plain_words("/srv/a/b.safetensors: the tensor data ends early"),
            "b.safetensors: the tensor data ends early");
  EXPECT_EQ(plain_words("every tensor has a name"), "every tensor has a name");
  EXPECT_EQ(plain_words(""), "");
}
