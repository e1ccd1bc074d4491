// What a resumed run must share with the run that wrote its checkpoint (model shape, adapters, data layout, data
// sources), as the JSON text Trainer::fingerprint() writes into trainer_state.json.
#pragma once

#include <string>

namespace ft::train {

// True when the fingerprint saved in a checkpoint and the current one describe the same run: equal text, or equal
// but for data source paths that name the same existing file (a run started before config.yaml named its generated
// data by absolute path saved it relative to the working directory).
bool same_fingerprint(const std::string& saved, const std::string& current);

}  // namespace ft::train
