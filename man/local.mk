# man fragment, included by the top Makefile.am
#
# Every public function has a page man/<function>.3: shared pages carry the
# text, and the other names of a shared page are ".so man3/<page>.3" links.
# tests/check-man.sh fails when a function has no page or a page in man/ is
# missing from this list.

# Overview, and debugging.
dist_man_MANS += man/shmap.7 man/shmap-debugging.7

# Errors and dtypes.
dist_man_MANS += \
	man/shmap_strerror.3 \
	man/shmap_errmsg.3 \
	man/shmap_dtype_size.3 \
	man/shmap_dtype_name.3 \
	man/shmap_dtype_class.3 \
	man/shmap_f32_to_bf16.3 \
	man/shmap_bf16_to_f32.3 \
	man/shmap_f32_to_f16.3 \
	man/shmap_f16_to_f32.3

# Reductions and ppermute out of place.
dist_man_MANS += \
	man/shmap_psum_new.3 \
	man/shmap_pmax_new.3 \
	man/shmap_pmin_new.3 \
	man/shmap_pmean_new.3 \
	man/shmap_ppermute_new.3

# Meshes.
dist_man_MANS += \
	man/shmap_mesh_create.3 \
	man/shmap_mesh_create_axes.3 \
	man/shmap_mesh_destroy.3 \
	man/shmap_mesh_axis_name.3 \
	man/shmap_mesh_naxes.3 \
	man/shmap_mesh_ndevices.3 \
	man/shmap_mesh_axis_size.3 \
	man/shmap_mesh_axis_find.3 \
	man/shmap_mesh_device_coords.3 \
	man/shmap_mesh_device_id.3

# Partition specs and global arrays.
dist_man_MANS += \
	man/shmap_spec_check.3 \
	man/shmap_array_from_host.3 \
	man/shmap_array_to_host.3 \
	man/shmap_array_destroy.3 \
	man/shmap_array_dtype.3 \
	man/shmap_array_rank.3 \
	man/shmap_array_shape.3 \
	man/shmap_array_numel.3

# Sharded arrays and data movement statistics.
dist_man_MANS += \
	man/shmap_array_from_host_sharded.3 \
	man/shmap_array_zeros.3 \
	man/shmap_array_fill.3 \
	man/shmap_array_init.3 \
	man/shmap_array_reshard.3 \
	man/shmap_array_block.3 \
	man/shmap_array_mesh.3 \
	man/shmap_array_spec.3 \
	man/shmap_array_visualize.3 \
	man/shmap_mesh_stats.3 \
	man/shmap_mesh_stats_reset.3

# Debugging.
dist_man_MANS += \
	man/shmap_set_watchdog.3 \
	man/shmap_trace_start.3 \
	man/shmap_trace_stop.3

# Blocks.
dist_man_MANS += \
	man/shmap_block_numel.3 \
	man/shmap_block_nbytes.3 \
	man/shmap_block_alloc.3 \
	man/shmap_block_free.3

# The map and what a body calls.
dist_man_MANS += \
	man/shmap_map.3 \
	man/shmap_map_flags.3 \
	man/shmap_ctx_device.3 \
	man/shmap_ctx_mesh.3 \
	man/shmap_in.3 \
	man/shmap_out.3 \
	man/shmap_out_copy.3 \
	man/shmap_out_set.3 \
	man/shmap_fail.3

# Collectives.
dist_man_MANS += \
	man/shmap_axis_index.3 \
	man/shmap_axis_size.3 \
	man/shmap_psum.3 \
	man/shmap_pmax.3 \
	man/shmap_pmin.3 \
	man/shmap_pmean.3 \
	man/shmap_psum_scatter.3 \
	man/shmap_all_gather.3 \
	man/shmap_all_to_all.3 \
	man/shmap_ppermute.3

TESTS += tests/check-man.sh
EXTRA_DIST += tests/check-man.sh

# Parts of a mesh: maps over some axes, nested maps, sub-meshes, transfers.
dist_man_MANS += \
	man/shmap_map_ex.3 \
	man/shmap_map_nested.3 \
	man/shmap_ctx_outer.3 \
	man/shmap_ctx_manual_axes.3 \
	man/shmap_mesh_slice.3 \
	man/shmap_mesh_submesh.3 \
	man/shmap_mesh_parent.3 \
	man/shmap_mesh_parent_device.3 \
	man/shmap_array_transfer.3
