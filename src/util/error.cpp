#include "util/error.h"

#include <c10/util/Exception.h>

namespace ft {

std::string first_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string what = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  return what.substr(0, what.find('\n'));
}

namespace detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::string where = std::string(file) + ":" + std::to_string(line);
  throw Error(message + " [check '" + condition + "' failed at " + where + "]");
}

}  // namespace detail
}  // namespace ft
