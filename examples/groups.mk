# SPDX-License-Identifier: MIT
# examples fragment: collectives within groups, pbroadcast,
# ragged_all_to_all (a mixture-of-experts layer) and user reductions.
