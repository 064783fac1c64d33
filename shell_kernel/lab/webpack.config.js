// Merged into @jupyterlab/builder's webpack config. Module ids by order of
// use instead of by hashed identifier: the federation container's identifier
// holds absolute paths, so the default ids (and the committed file names)
// would depend on where the checkout is.
module.exports = {
  optimization: { moduleIds: 'natural' }
};
