// launcher/shell_words.h: --rsh split into words as a shell splits a command line.
#include "launcher/shell_words.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gyre::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Words(const std::string& text) {
  StatusOr<std::vector<std::string>> words = SplitShellWords(text);
  EXPECT_TRUE(words.ok()) << text << ": " << words.status();
  return words.ok() ? *words : std::vector<std::string>{"<error>"};
}

TEST(ShellWordsTest, BlanksSeparateWords) {
  EXPECT_THAT(Words("ssh -o BatchMode=yes"), ElementsAre("ssh", "-o", "BatchMode=yes"));
  EXPECT_THAT(Words("  ip\tnetns \n exec  "), ElementsAre("ip", "netns", "exec"));
  EXPECT_THAT(Words(""), ElementsAre());
  EXPECT_THAT(Words(" \t "), ElementsAre());
}

TEST(ShellWordsTest, QuotesKeepBlanksInOneWord) {
  // The case that split into `sh`, `-c`, `"exit` and `0"`.
  EXPECT_THAT(Words("sh -c \"exit 0\""), ElementsAre("sh", "-c", "exit 0"));
  EXPECT_THAT(Words("ssh -o 'ProxyCommand ssh -W %h:%p jump'"),
              ElementsAre("ssh", "-o", "ProxyCommand ssh -W %h:%p jump"));
  // Quotes meet within a word; an empty pair alone is an empty word.
  EXPECT_THAT(Words("a'b c'\"d e\"f"), ElementsAre("ab cd ef"));
  EXPECT_THAT(Words("x '' \"\" y"), ElementsAre("x", "", "", "y"));
}

TEST(ShellWordsTest, SingleQuotesTakeEverythingAsItIs) {
  EXPECT_THAT(Words(R"('a\b' 'say "hi"')"), ElementsAre(R"(a\b)", R"(say "hi")"));
}

TEST(ShellWordsTest, BackslashEscapesOutsideQuotesAndOnlyFiveCharactersInDoubleQuotes) {
  EXPECT_THAT(Words(R"(a\ b \'c\' \\)"), ElementsAre("a b", "'c'", "\\"));
  EXPECT_THAT(Words(R"("\$ \` \" \\ \n \a")"), ElementsAre(R"($ ` " \ \n \a)"));
  // Backslash-newline joins lines, in or out of double quotes.
  EXPECT_THAT(Words("ab\\\ncd \"ef\\\ngh\""), ElementsAre("abcd", "efgh"));
}

TEST(ShellWordsTest, NothingIsExpanded) {
  EXPECT_THAT(Words("$HOME `id` * ~ $(x)"), ElementsAre("$HOME", "`id`", "*", "~", "$(x)"));
}

TEST(ShellWordsTest, AnUnterminatedQuoteOrATrailingBackslashIsRefusedByName) {
  StatusOr<std::vector<std::string>> words = SplitShellWords("sh -c \"exit 0");
  ASSERT_FALSE(words.ok());
  EXPECT_EQ(words.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(words.status().message(),
              HasSubstr("unterminated double quote: the \" at byte 6 has no closing \""));
  words = SplitShellWords("ssh -o 'a b");
  ASSERT_FALSE(words.ok());
  EXPECT_THAT(words.status().message(),
              HasSubstr("unterminated single quote: the ' at byte 7 has no closing '"));
  words = SplitShellWords("ssh \"a\\\"");  // the escaped quote does not close it
  ASSERT_FALSE(words.ok());
  EXPECT_THAT(words.status().message(), HasSubstr("unterminated double quote"));
  words = SplitShellWords("ssh x\\");
  ASSERT_FALSE(words.ok());
  EXPECT_THAT(words.status().message(), HasSubstr("backslash at byte 5 ends the text"));
}

}  // namespace
}  // namespace gyre::launcher
