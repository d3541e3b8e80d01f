#pragma once

// reduce_scatter, all_gather and broadcast between the threads of one
// process, over buffers they share (collective_group's payload): each rank
// does its own part of the work after the rendezvous and meets the others
// at the barrier, so no rank's buffers go away while another reads them.
// Outputs must not overlap inputs. Every rank reads the others' buffers
// directly: reduce_scatter reads N blocks of E elements and writes one,
// all_gather reads N blocks and writes N, broadcast copies the root's
// buffers once per rank. A rank that fails (or passes
// collective_options::failure) fails the collective on every rank.

#include <cstddef>
#include <span>

#include "collectives/collective_group.hpp"
#include "collectives/collective_options.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

namespace lockstep::detail {

/// `output` (E elements) receives block `rank` of the reduction of every
/// rank's `input` (N·E elements), ranks combined in order. Throws
/// dtype_error / value_error for buffers that do not fit, then as
/// collective_group::arrive and wait_all_done.
void reduce_scatter_blocks(collective_group& group, std::size_t rank, reduce_op op,
                           const tensor& input, tensor& output,
                           const collective_options& options);

/// `output` (N·E elements) receives every rank's `input` (E elements) in
/// rank order; throws as reduce_scatter_blocks.
void all_gather_blocks(collective_group& group, std::size_t rank, const tensor& input,
                       tensor& output, const collective_options& options);

/// Every rank's `buffers` receive a copy of rank `root`'s (the same dtypes
/// and shapes on every rank, checked by the fingerprint); throws as
/// reduce_scatter_blocks.
void broadcast_buffers(collective_group& group, std::size_t rank, std::size_t root,
                       std::span<tensor> buffers, const collective_options& options);

} // namespace lockstep::detail
