#include "launcher/shell_words.h"

namespace gyre::launcher {

StatusOr<std::vector<std::string>> SplitShellWords(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // a word has begun, even if it is still empty ('' or "")
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (i + 1 == text.size()) {
        return InvalidArgumentError("the backslash at byte " + std::to_string(i) +
                                    " ends the text and escapes nothing");
      }
      ++i;
      if (text[i] != '\n') word += text[i];  // backslash-newline: the line goes on
      continue;
    }
    if (c == '\'' || c == '"') {
      const size_t open = i;
      for (++i; i < text.size() && text[i] != c; ++i) {
        if (c == '"' && text[i] == '\\' && i + 1 < text.size() &&
            std::string("$`\"\\\n").find(text[i + 1]) != std::string::npos) {
          ++i;
          if (text[i] == '\n') continue;
        }
        word += text[i];
      }
      if (i == text.size()) {
        return InvalidArgumentError(std::string("unterminated ") +
                                    (c == '\'' ? "single" : "double") + " quote: the " + c +
                                    " at byte " + std::to_string(open) + " has no closing " + c);
      }
      continue;
    }
    word += c;
  }
  if (in_word) words.push_back(word);
  return words;
}

}  // namespace gyre::launcher
