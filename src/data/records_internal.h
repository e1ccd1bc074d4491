// Internals of the record readers shared with the preference reader (records.cpp, preference.cpp): what a chat
// record's messages and a record's JSON object go through, so every format reports bad lines the same way.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "data/records.h"
#include "jinja/template.h"

namespace ft::data {

// A JSON array of chat messages (the record's field `field`, named so in errors) as {"role", "content", ...} objects,
// as chat records read theirs: role and content under data.fields' names, roles mapped through options.roles, other
// keys kept for the template. RecordError for a non-array, an empty list, a non-object, a missing or non-string role
// or content, and a role outside system/user/assistant (plus tool, ipython, function, developer with
// `model_template`).
jinja::Value parse_message_list(const nlohmann::json& list, const std::string& field, const RecordOptions& options,
                                bool model_template);

// One record's text as a JSON object: RecordError for invalid UTF-8, invalid JSON or a value that is not an object.
nlohmann::json parse_record_object(std::string_view line);

// A record's text as JSON of any type, arrays and objects nested at most jinja::detail::kMaxNesting deep (what the chat
// templates take): RecordError for invalid JSON and for deeper nesting, which is refused while parsing, before the
// recursive copies and walks of the value could exhaust the stack.
nlohmann::json parse_record_json(std::string_view text);

}  // namespace ft::data
