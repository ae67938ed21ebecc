# Meta-tests: "planted bug : law family (doctest test suite) that must catch it".
# The bug sites are KALMAN_ORACLE_MUTANT(...) in reference/include; docs/testing.md lists them.
set(KALMAN_ORACLE_META_TESTS
  # algebra: Möbius and affine laws (algebra/mobius.hpp, algebra/affine.hpp)
  mobius_compose_commuted:algebra
  mobius_rescale_one_entry:algebra
  affine_compose_wrong_rho:algebra
  # leaves: each leaf reproduces one step of its model (algebra/leaves.hpp)
  kla_leaf_wrong_decay:leaves
  diag_kdn_leaf_missing_u:leaves
  iso_kdn_leaf_wrong_trace:leaves
  # ou: the OU discretisation (algebra/ou_discretisation.hpp)
  ou_one_minus_exp:ou
  ou_missing_half:ou
  # scan: every schedule equals the fold, exactly (scan/*.hpp)
  hillis_steele_commuted_compose:scan
  blelloch_downsweep_off_by_one:scan
  brent_kung_downsweep_skips_level:scan
  sklansky_wrong_source:scan
  chunked_carry_skips_last:scan
  tiled_kogge_stone_in_place:scan
  # scan_mpfr: every schedule within the stated bound of the fold at 256 bits
  brent_kung_lossy_compose:scan_mpfr
  # kla: Kalman Linear Attention (models/kla.hpp, models/kla_parallel.hpp)
  kla_read_before_write:kla
  kla_mean_decay_wrong_time:kla
  kla_recovery_inverts_wrong_leaf:kla
  kla_yvar_missing_square:kla
  kla_precision_decay_not_squared:kla
  # fixed_gain: sequential and chunked WY forms of docs/math.md §7 (models/fixed_gain*.hpp)
  fixed_gain_decay_after_delta:fixed_gain
  fixed_gain_read_before_write:fixed_gain
  fixed_gain_transposed_state:fixed_gain
  wy_chunk_carry_skips_last:fixed_gain
  # kdn: diagonal and isotropic KDN (models/diagonal.hpp, isotropic.hpp, kdn_parallel.hpp)
  kdn_gain_after_write:kdn
  kdn_mu_before_gain:kdn
  kdn_decay_after_delta:kdn
  kdn_read_before_write:kdn
  iso_kdn_norm_not_squared:kdn
  # dense: moment form = information form, ridge, invariants (models/dense.hpp, models/information.hpp)
  dense_gain_after_write:dense
  dense_decay_after_update:dense
  dense_transposed_state:dense
  dense_read_before_write:dense
  information_missing_noise:dense
  # models_cross: equalities between models (properties/models_cross_equivalences.cpp)
  kdn_read_before_write:models_cross
  kdn_gain_after_write:models_cross
  iso_kdn_norm_not_squared:models_cross
  fixed_gain_decay_after_delta:models_cross
  dense_gain_after_write:models_cross
  # error_bound: the per-element error bounds hold for honest runs (check/delta_rule_bound.hpp)
  delta_bound_forgets_history:error_bound
  gla_bound_forgets_history:error_bound
  contraction_bound_drops_child:error_bound
  affine_bound_drops_coefficient_error:error_bound
  log_weight_ignores_error:error_bound
  two_key_bound_forgets_history:error_bound
  two_key_adjoint_steps_forward:error_bound
  two_key_injection_not_propagated:error_bound
  two_key_carry_only_locals_not_grown:error_bound
  running_error_sum_drops_rounding:error_bound
  memory_error_bound_drops_carried:error_bound
  wy_chunk_bound_drops_carried:error_bound
  chunked_adjoint_bound_forgets_state_error:error_bound
  running_error_drops_operand_rounding:error_bound
  wy_adjoint_bound_drops_carried:error_bound
  wy_pseudo_value_bound_drops_key_products:error_bound
  wy_adjoint_bound_drops_cotangent_error:error_bound
  kdn_posterior_rule_drops_propagated:error_bound
  # kdn_leaf_local: the KDN covariance leaf's trajectory-local factors (check/kdn_leaf_local.hpp)
  kdn_local_lipschitz_at_centre:kdn_leaf_local
  kdn_local_action_drops_gain:kdn_leaf_local
  # rounding: correctly rounded conversions from MPFR (scalar/rounding.hpp)
  round_ties_away:rounding
  # grad: reference adjoints = tape = duals = central differences (reference/include/kalman_oracle/grad/*.hpp)
  grad_memory_erase_sign:grad
  grad_log_gate_linear_branch:grad
  grad_broadcast_overwrites:grad
  grad_kla_missing_mean_term:grad
  grad_kla_noise_wrong_time:grad
  grad_kdn_covariance_wrong_time:grad
  grad_dense_missing_gain_term:grad
  grad_wy_missing_state_term:grad
  grad_kdn_parallel_drops_key_share:grad
)
