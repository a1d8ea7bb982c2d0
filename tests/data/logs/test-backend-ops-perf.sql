CREATE TABLE IF NOT EXISTS test_backend_ops (
  test_time TEXT,
  build_commit TEXT,
  backend_name TEXT,
  op_name TEXT,
  op_params TEXT,
  test_mode TEXT,
  supported INTEGER,
  passed INTEGER,
  error_message TEXT,
  time_us REAL,
  flops REAL,
  bandwidth_gb_s REAL,
  memory_kb INTEGER,
  n_runs INTEGER,
  device_description TEXT,
  backend_reg_name TEXT
);

INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:15:30Z', 'unknown', 'BLAS', 'MUL_MAT', 'type_a=f16,type_b=f32,m=1024,n=128,k=1024,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1', 'perf', '1', '1', '', '150.000000', '1789569706666.666748', '0.000000', '3072', '6690', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:15:30Z', 'unknown', 'BLAS', 'MUL_MAT', 'type_a=f16,type_b=f32,m=1024,n=512,k=1024,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1', 'perf', '1', '1', '', '480.500000', '2234634389177.939453', '0.000000', '6144', '2088', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:15:30Z', 'unknown', 'BLAS', 'ADD', 'type=f32,ne=[1024,128,1,1],nr=[1,1,1,1],nf=1,perm1=0', 'perf', '0', '0', 'not supported', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:15:30Z', 'unknown', 'BLAS', 'SIN', 'type=f32,ne=[1024,128,1,1]', 'perf', '0', '0', 'not supported', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
CREATE TABLE IF NOT EXISTS test_backend_ops (
  test_time TEXT,
  build_commit TEXT,
  backend_name TEXT,
  op_name TEXT,
  op_params TEXT,
  test_mode TEXT,
  supported INTEGER,
  passed INTEGER,
  error_message TEXT,
  time_us REAL,
  flops REAL,
  bandwidth_gb_s REAL,
  memory_kb INTEGER,
  n_runs INTEGER,
  device_description TEXT,
  backend_reg_name TEXT
);

INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:16:02Z', 'unknown', 'CPU', 'MUL_MAT', 'type_a=f16,type_b=f32,m=1024,n=8,k=1024,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1', 'perf', '1', '1', '', '20.500000', '818400780487.804932', '0.000000', '2112', '49131', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:16:02Z', 'unknown', 'CPU', 'MUL_MAT', 'type_a=f16,type_b=f32,m=1024,n=32,k=1024,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1', 'perf', '1', '1', '', '55.250000', '1214640072398.189941', '0.000000', '2304', '18120', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:16:02Z', 'unknown', 'CPU', 'MUL_MAT', 'type_a=f16,type_b=f32,m=1024,n=128,k=1024,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1', 'perf', '1', '1', '', '190.000000', '1412818189473.684326', '0.000000', '3072', '5280', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:16:02Z', 'unknown', 'CPU', 'MUL_MAT', 'type_a=f16,type_b=f32,m=1024,n=512,k=1024,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1', 'perf', '1', '1', '', '712.750000', '1506477480182.392090', '0.000000', '6144', '1408', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:16:02Z', 'unknown', 'CPU', 'MUL_MAT', 'type_a=f32,type_b=f32,m=1024,n=32,k=1024,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1', 'perf', '1', '1', '', '80.000000', '838860800000.000000', '0.000000', '4352', '12600', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:16:02Z', 'unknown', 'CPU', 'IM2COL', 'type_input=f32,type_kernel=f16,dst_type=f32,ne_input=[3000,128,1,1],ne_kernel=[3,128,1280,1],s0=1,s1=0,p0=1,p1=0,d0=1,d1=0,is_2D=0', 'perf', '1', '1', '', '1510.400000', '0.000000', '4.394580', '6960', '1206', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:16:02Z', 'unknown', 'CPU', 'ADD', 'type=f32,ne=[1024,128,1,1],nr=[1,1,1,1],nf=1,perm1=0', 'perf', '1', '1', '', '35.200000', '0.000000', '41.614879', '1536', '32772', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-03-02T10:16:02Z', 'unknown', 'CPU', 'SIN', 'type=f32,ne=[1024,128,1,1]', 'perf', '1', '1', '', '120.600000', '0.000000', '8.097533', '1024', '16384', '', '');
