// The checks every context of the client config passes, shared by its parser and by the verbs
// that build a context from flags (tessera login), so that both refuse the same things with the
// same words.
#pragma once

#include <string_view>

#include "client/client_config.h"
#include "common/error.h"

namespace tessera::client {

// A context's name: 1..63 of [a-z0-9._-], starting with a letter or a digit.
Status CheckContextName(std::string_view name, std::string_view field);
// Every field of `context`; InvalidArgument "<field>.<key>: ..." naming the first bad one, with
// an excerpt of its value at most.
Status CheckClientContext(const ClientContext& context, std::string_view field);

}  // namespace tessera::client
