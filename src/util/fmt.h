// Formatting for torch-side code: torch's bundled fmt, header-only (FMT_HEADER_ONLY comes from ft_torch).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/log.h"

#define FT_LOG_TRACE(...) ::ft::log::trace(::fmt::format(__VA_ARGS__))
#define FT_LOG_DEBUG(...) ::ft::log::debug(::fmt::format(__VA_ARGS__))
#define FT_LOG_INFO(...) ::ft::log::info(::fmt::format(__VA_ARGS__))
#define FT_LOG_WARN(...) ::ft::log::warn(::fmt::format(__VA_ARGS__))
#define FT_LOG_ERROR(...) ::ft::log::error(::fmt::format(__VA_ARGS__))
