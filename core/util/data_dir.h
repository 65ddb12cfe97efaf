#pragma once
// Where decoderscope's read-only data is: the built-in models (models/NAME), the lessons
// (lessons/), the fonts (fonts/) and the window's shaders (shaders/). A name such as
// "models/stories" is looked for in these places, in this order:
//
//   1. installed:  <the program's folder>/../share/decoderscope/NAME (the program's
//                  folder from /proc/self/exe), as `cmake --install` and the .deb lay it out;
//   2. build tree: <source tree>/assets/NAME (shaders: <source tree>/shaders/...), only for
//                  a program that runs from the folder it was built in (DS_BINARY_DIR): an
//                  installed copy never reads the checkout it was built from;
//   3. $DECODERSCOPE_DATA/NAME, a folder laid out as share/decoderscope.
//
// A name that none of them has ends in a message naming every place looked in.
#include <string>
#include <vector>

namespace ds {

// What the search starts from: the process's own facts (from_process), or a test's.
struct DataSearch {
  std::string exe;         // the program's path; "" when unknown
  std::string build_dir;   // the folder the programs were built in; "" for none
  std::string source_dir;  // the source tree the build tree's data is in
  std::string env;         // $DECODERSCOPE_DATA; "" when unset or empty
  static DataSearch from_process();
};

// One place a name may be: which rule it comes from ("installed", "build tree",
// "DECODERSCOPE_DATA") and the path it would have there.
struct DataPlace {
  std::string rule;
  std::string path;
};

// The places, in order, where name may be (only the rules that apply: no build tree for an
// installed program, no variable when it is unset). name is relative ("models/stories");
// one that is absolute or climbs out ("..") has none.
std::vector<DataPlace> data_places(const std::string& name, const DataSearch& s = DataSearch::from_process());

// The first of data_places(name) that exists, or "".
std::string find_data(const std::string& name, const DataSearch& s = DataSearch::from_process());

// find_data(name), or throws ds::Error "<what>: not found; looked in P1 (rule), P2 (rule),
// ..." (and that DECODERSCOPE_DATA can name another folder).
std::string require_data(const std::string& name, const std::string& what,
                         const DataSearch& s = DataSearch::from_process());

// The entries (file or folder names) of the folder `name` over every place, each once,
// sorted: the built-in models are the entries of "models".
std::vector<std::string> list_data(const std::string& name, const DataSearch& s = DataSearch::from_process());

}  // namespace ds
