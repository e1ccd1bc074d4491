#include "util/error.h"

namespace ft::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::string where = std::string(file) + ":" + std::to_string(line);
  throw Error(message + " [check '" + condition + "' failed at " + where + "]");
}

}  // namespace ft::detail
