#pragma once
// An in-window file browser (Dear ImGui has none): the folders and files of one folder,
// filtered for what is being opened, with a parent button and the typed path kept.
// Used by File > Open model, Open trace and the save dialogs' choice of folder.
#include <string>
#include <vector>

namespace dsgui {

enum class BrowseFor {
  Model,      // llama2.c .bin, .safetensors, .gguf, and folders holding a config.json (a GPT-2 folder)
  Trace,      // .dstrace and .json
  SaveTrace,  // saving a trace: folders, and the traces already there (a click takes the name)
  SavePng,    // saving a picture: folders, and the PNG files already there
};
inline bool is_save(BrowseFor u) { return u == BrowseFor::SaveTrace || u == BrowseFor::SavePng; }

struct FileEntry {
  std::string name;
  bool folder = false;
  bool model_folder = false;  // a folder holding config.json: opened as a model
};

// The entries of dir for a use: folders first, then the matching files, each sorted by
// name (hidden ones, starting with '.', left out). Never throws: a folder that cannot be
// read leaves error set (in words) and the list empty.
std::vector<FileEntry> list_folder(const std::string& dir, BrowseFor use, std::string& error);

struct FileBrowser {
  std::string dir;  // the folder shown; "" = the current directory
  std::string listed;
  BrowseFor listed_for = BrowseFor::Model;
  std::vector<FileEntry> entries;
  std::string error;
  int selected = -1;
  void refresh() { listed = "\x01"; }  // list the folder again next frame
};

// Draws the browser (height: of its list) and keeps path in step with it: a click
// puts the entry's path in path, a folder's double-click opens the folder, a file's (or
// a model folder's) double-click returns true: path is the choice. For the saves, a
// folder changes path's folder and keeps its file name; a file already there puts its
// name in path (saving then replaces it).
bool file_browser(FileBrowser& fb, BrowseFor use, std::string& path, float height);

// The next free numbered picture in dir: stem-001.png, stem-002.png, ... one more than
// the highest number there (a gap is not filled: the numbers follow the order taken).
// dir "" is the current directory. Never throws (an unreadable folder counts as empty).
std::string next_numbered_png(const std::string& dir, const std::string& stem);

}  // namespace dsgui
